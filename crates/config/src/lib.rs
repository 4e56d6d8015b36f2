//! The server's configuration as plain data: the options
//! (`options`), read from a config file (`file`) and then the command
//! line (`cli`), with nats-server's defaults, keys, flags and errors.
//!
//! Nothing here knows a runtime type: what the options describe is built
//! where it runs (TLS and operator trust in `auth`, the subject space in
//! `flotilla-core`).

pub mod cli;
pub mod file;
pub mod links;
pub mod options;

pub use file::load;
