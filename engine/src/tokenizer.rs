//! Tokenizers (placeholder, being written).
