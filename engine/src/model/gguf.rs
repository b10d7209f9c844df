//! GGUF (placeholder, being written).
