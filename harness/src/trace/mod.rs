//! Traces (placeholder, being written).
