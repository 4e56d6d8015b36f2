//! JetStream's drivers: what carries the sans-IO service (`jsservice`)
//! into a running server. `js` is one server's driver (stream actors,
//! the group committer, persistence); `jscluster` is a cluster's (the
//! Raft node, the meta group, stream replicas). Both reach the core only
//! through `flotilla_core::bus` (subscribe, publish, interest) and, for
//! the cluster, `jscluster::ClusterView` (routes, names, shutdown). The
//! `jsmonitor` crate shows their state to monitoring.

pub mod js;
pub mod jscluster;
