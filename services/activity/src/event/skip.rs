//! serde `skip_serializing_if` predicates shared by the payloads.

pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}
