//! Identifiers as types, so an execution's id cannot go where a turn's is expected, nor a
//! generation where a count is. Each id reads as `&str` (it derefs to one, for logs, wire
//! messages and SQL binds); making one from text is explicit (`From`), which is where a
//! string from outside becomes an id of a kind.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($($(#[$doc:meta])* $name:ident;)+) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<&$name> for $name {
            fn from(id: &$name) -> Self {
                id.clone()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    )+};
}

string_id! {
    /// An execution: one agent process and one ACP session.
    ExecutionId;
    /// One prompt of an execution and everything the agent did for it.
    TurnId;
    /// A question, plan or permission the agent asked, persisted before it is exposed.
    InteractionId;
}

/// Which lease of an execution a write speaks for: every takeover or reload moves it on,
/// and the store refuses a write from any other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Generation(i64);

impl Generation {
    /// The generation an execution is created at.
    pub const FIRST: Self = Self(1);

    pub const fn new(generation: i64) -> Self {
        Self(generation)
    }

    pub const fn get(self) -> i64 {
        self.0
    }

    /// The generation a takeover or reload moves to.
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

/// How a stored generation reads back.
impl From<i64> for Generation {
    fn from(generation: i64) -> Self {
        Self(generation)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_as_its_text_and_serializes_as_a_bare_string() {
        let id = ExecutionId::from("exec-1");
        assert_eq!(&*id, "exec-1");
        assert_eq!(id, "exec-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""exec-1""#);
        assert_eq!(serde_json::from_str::<ExecutionId>(r#""exec-1""#).unwrap(), id);
    }

    #[test]
    fn a_generation_moves_on_by_one_and_serializes_as_a_bare_number() {
        assert_eq!(Generation::FIRST.next(), Generation::new(2));
        assert!(Generation::new(2) > Generation::FIRST);
        assert_eq!(serde_json::to_string(&Generation::new(7)).unwrap(), "7");
    }
}
