//! Statistics (placeholder, being written).
