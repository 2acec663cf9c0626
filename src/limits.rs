//! The open-files limit `strait serve` needs: every segment of every
//! partition keeps [`FILES_PER_SEGMENT`] descriptors open, and every client
//! connection one more, so the default soft limit of 1024 runs out at a few
//! hundred partitions. Kafka's documentation asks operators for 100,000.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use strait_spool::FILES_PER_SEGMENT;

/// Descriptors Strait keeps beside partitions and connections: standard
/// streams, the listener, the runtime's epoll and event descriptors, and
/// files opened for a moment (recovery points, topic metadata).
pub const RESERVED_FILES: u64 = 64;

/// Tried when the hard limit is unlimited (never on Linux, whose hard limit
/// is at most `fs.nr_open`): Linux's default `fs.nr_open`.
const UNLIMITED_TARGET: u64 = 1 << 20;

/// How the limit was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit found at start (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit now.
    pub now: Option<u64>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. If that fails the
/// limit stays as it was, with a warning.
pub fn raise_open_files() -> OpenFiles {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let target = Some(maximum.unwrap_or(UNLIMITED_TARGET));
    if current.is_none() || current >= target {
        return OpenFiles {
            before: current,
            now: current,
        };
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: target,
            maximum,
        },
    ) {
        Ok(()) => OpenFiles {
            before: current,
            now: target,
        },
        Err(e) => {
            tracing::warn!(
                "cannot raise the open files limit from {} to {}: {e}",
                show(current),
                show(target)
            );
            OpenFiles {
                before: current,
                now: current,
            }
        }
    }
}

/// Partitions of one segment that fit in `limit` beside `connections`
/// connections and [`RESERVED_FILES`].
pub fn partitions_room(limit: Option<u64>, connections: u64) -> Option<u64> {
    limit.map(|n| n.saturating_sub(connections + RESERVED_FILES) / FILES_PER_SEGMENT)
}

/// Logs the limit and what it allows: at INFO, or as a warning if
/// connections alone could use it up.
pub fn log_open_files(files: OpenFiles, connections: u64) {
    let how = if files.now == files.before {
        "(the hard limit)".to_owned()
    } else {
        format!("(raised from {})", show(files.before))
    };
    let Some(room) = partitions_room(files.now, connections) else {
        tracing::info!("open files limit unlimited: room for any number of partitions");
        return;
    };
    if room == 0 {
        tracing::warn!(
            "open files limit {} {how} leaves no room for partitions beside {connections} \
             connections: raise the hard limit (ulimit -Hn, or LimitNOFILE= under systemd) to \
             100000 as Kafka's documentation advises, or lower server.max_connections",
            show(files.now)
        );
        return;
    }
    tracing::info!(
        "open files limit {} {how}: room for about {room} partitions at {FILES_PER_SEGMENT} \
         files each (per segment) beside {connections} connections",
        show(files.now)
    );
}

fn show(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_what_is_left_after_connections_and_the_reserve() {
        assert_eq!(partitions_room(Some(20_000), 10_000), Some((20_000 - 10_064) / 3));
        assert_eq!(partitions_room(Some(1_024), 10_000), Some(0));
        assert_eq!(partitions_room(None, 10_000), None);
    }
}
