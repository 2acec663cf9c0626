//! Strait's gateway: the Kafka wire protocol server and the local broker
//! over the spool.
//!
//! A request's path: [`server`] accepts the connection and reads a frame
//! ([`frame`]); [`codec`] decodes the header and body with the
//! `kafka-protocol` crate; the [`broker`] answers it from the local topics
//! ([`topics`], stored in the spool), the consumer [`group`] coordinator and
//! the idempotent [`producers`] state; [`codec`] encodes the response and the
//! server writes it back, in request order.
//!
//! - [`auth`]: per listener, TLS termination, SASL logins against the
//!   users file, and the gate each request passes before the router.
//! - [`router`]: in front of the broker when `routes:` lead to upstream
//!   clusters: splits each request by destination and merges the answers.
//! - [`instances`]: several `strait serve` processes as one logical
//!   cluster (`instances:`): who is alive, and what clients are shown.
//! - [`launch`]: assembles all of it from a configuration and shuts it down.
//! - [`metrics`]: the gateway's Prometheus metrics.
//! - [`versions`]: the APIs and versions Strait advertises.
//! - [`error`]: errors, and the one function that picks Kafka error codes.
//! - `files`: small data-directory files replaced whole, crash-safe.
//! - [`alloc`]: the global allocator that keeps forged array lengths in a
//!   request from aborting the process.

pub mod alloc;
pub mod auth;
pub mod broker;
pub mod codec;
pub mod error;
mod files;
pub mod frame;
pub mod group;
pub mod instances;
pub mod launch;
pub mod metrics;
pub mod producers;
pub mod router;
pub mod server;
pub mod topics;
pub mod versions;
