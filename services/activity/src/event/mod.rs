//! The canonical event families (PRP spellings) and their payloads.

mod artifact;
mod delegation;
mod item;
mod notice;
mod payload;
mod plan;
mod process;
mod request;
mod session;
mod skip;
mod tool;
mod turn;
mod usage;

pub use artifact::*;
pub use delegation::*;
pub use item::*;
pub use notice::*;
pub use payload::*;
pub use plan::*;
pub use process::*;
pub use request::*;
pub use session::*;
pub use tool::*;
pub use turn::*;
pub use usage::*;

#[cfg(test)]
mod tests;
