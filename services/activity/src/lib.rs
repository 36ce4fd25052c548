//! The closed set of canonical activity events and the normalizer that turns ACP
//! `session/update`s into them. Pure: no I/O.

mod bounds;
mod event;
mod normalizer;

pub use bounds::{
    BoundedText, MAX_ITEM_TEXT_CHARS, MAX_RAW_INPUT_BYTES, MAX_TOOL_OUTPUT_BYTES, bound_output, bound_text,
};
pub use event::*;
pub use normalizer::TurnNormalizer;
