//! Serialization back to keyword/value and URI form.
