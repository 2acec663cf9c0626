//! Strait's client for upstream Kafka clusters, built on `kafka-protocol`
//! rather than a high-level client: the mirror and the topic router move
//! record batches as bytes, which no high-level client allows.
//!
//! - [`Connection`] (`conn`): one pipelined connection to one broker.
//!   Many requests in flight, answers matched by correlation id, a broken
//!   connection fails everything in flight at once, a cancelled caller
//!   never leaves half a frame on the wire. ApiVersions on connect; every
//!   request at the highest version both sides speak ([`versions`]).
//! - [`Cluster`] (`cluster`): the metadata cache of one cluster
//!   ([`Metadata`]), one connection per broker, leader and coordinator
//!   lookup.
//! - [`splice`]: frames whose record batches are chunks of their own, not
//!   copies (an upstream Produce, a client's Fetch response).
//! - `window`: how many Produce bytes a connection keeps unanswered (the
//!   path's bandwidth-delay product), so requests wait with the caller,
//!   not in socket buffers in front of a broker.
//! - [`Security`] (`security`): TLS (rustls) and SASL for a cluster's
//!   connections, re-authentication before a session ends (KIP-368);
//!   [`sasl`]: the mechanisms (PLAIN, SCRAM, OAUTHBEARER) and SCRAM's
//!   message parsers; [`oauth`]: OAUTHBEARER tokens from an OAuth 2.0
//!   token endpoint (client credentials); `stream`: plain or TLS bytes,
//!   split for the connection's reader and writer.
//! - [`group`]: a member of a group on a cluster (Kafka's classic group
//!   protocol), how several Strait processes agree on who is alive.
//! - [`log`]: a partition of Strait's own topics read and written as a
//!   log (create, append, ends, read).
//! - [`Backoff`]: jittered exponential backoff with deadlines for the
//!   callers' retry loops.
//! - [`UpstreamError`]: says which broker failed and whether a retry helps.
//!
//! The crate knows nothing of the spool, the gateway or the mirror; callers
//! build the requests and read the answers.

pub mod backoff;
pub mod cluster;
pub mod conn;
pub mod error;
pub mod group;
pub mod log;
pub mod metadata;
pub mod metrics;
pub mod oauth;
pub mod sasl;
pub mod security;
pub mod splice;
mod stream;
pub mod throttle;
pub mod versions;
mod window;

pub use backoff::Backoff;
pub use cluster::{Cluster, ClusterOptions, Health, Lane};
pub use conn::{Answer, ConnectOptions, Connection};
pub use error::{Result, UpstreamError};
pub use metadata::{Metadata, PartitionMetadata, TopicMetadata};
pub use security::Security;
pub use throttle::Throttled;
