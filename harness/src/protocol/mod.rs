//! What crosses the wire between the harness and any server, as the harness's own
//! ground floor: the HTTP routes every dialect shares and the dialects' names
//! (`routes`), and the Prometheus / OpenMetrics text format (`prom`). Must not know
//! how dialects differ, fetch anything, or interpret what a metric means.

pub mod prom;
pub mod routes;
