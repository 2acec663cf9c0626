//! Strait's gateway: Kafka wire framing and codec, the client-facing server,
//! the local broker over the spool, the topic router and the upstream client.
//!
//! Not built yet: this crate is the home of the `serve` subcommand (see the
//! README's Architecture section for where each piece will live).
