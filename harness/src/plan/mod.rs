//! Plans (placeholder, being written).
