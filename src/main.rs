//! The `strait` command line.
//!
//! - `strait serve [--config FILE] [--listen ADDR] [--data-dir DIR]`: run the
//!   Kafka broker for local topics (embedded defaults without a file).
//! - `strait mirror --config FILE`: run the configuration's mirrors;
//!   `strait mirror translate-offsets`: translate groups' offsets with a
//!   mirror's offset map.
//! - `strait check --config FILE`: validate a configuration, print it in full.
//! - `strait users add|remove|list`: the users who log in with SASL.
//! - `strait spool verify DIR`: check every batch and index entry on disk.
//! - `strait spool dump DIR [--from OFFSET] [--records]`: list the batches
//!   (and records) of a partition.
//!
//! `--log-format json` (any command) writes one JSON object per log line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod admin;
mod check;
mod lag;
mod limits;
mod mirror_cmd;
mod mirrors;
mod serve;
mod spool_cmd;
mod users_cmd;

/// Forged array lengths in a request must not abort the process (see the
/// allocator's documentation).
#[global_allocator]
static ALLOCATOR: strait_gateway::alloc::GuardedAlloc = strait_gateway::alloc::GuardedAlloc;

#[derive(Debug, Parser)]
#[command(
    name = "strait",
    version,
    about = "Kafka protocol gateway and cross-datacenter mirror"
)]
struct Cli {
    /// Log lines as text for people (`human`, the default) or one JSON
    /// object per line (`json`), on standard error. STRAIT_LOG sets the
    /// level (`info`; `debug`, `strait_gateway=trace`, ...).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "STRAIT_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Text with the time, level, span fields and message.
    Human,
    /// One JSON object per line: timestamp, level, fields, target, spans.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Strait: a Kafka broker for local spool topics. Without a
    /// configuration file it listens on 127.0.0.1:9092 and stores topics
    /// under ./data.
    Serve {
        /// The YAML configuration file (optional).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Address and port to listen on (overrides server.listen).
        #[arg(long)]
        listen: Option<String>,
        /// host:port clients are told to connect to (overrides
        /// server.advertised).
        #[arg(long)]
        advertised: Option<String>,
        /// Directory of the local topics (overrides data_dir).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Run the mirrors of a configuration file (`mirrors:`), with its admin
    /// listener (`admin.listen`: status page, /metrics, /readyz, JSON) if
    /// set.
    #[command(args_conflicts_with_subcommands = true)]
    Mirror {
        /// The YAML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: Option<MirrorCommand>,
    },
    /// Validate a configuration file and print the effective configuration.
    Check {
        /// The YAML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Inspect spool data on disk (read-only).
    #[command(subcommand)]
    Spool(SpoolCommand),
    /// Manage the users who log in with SASL (the users file, as
    /// `kafka-configs --alter --add-config SCRAM-SHA-512=...` manages
    /// Kafka's). A running Strait reads the file again when it changes.
    Users {
        #[command(subcommand)]
        command: UsersCommand,
        /// The users file.
        #[arg(long, global = true)]
        file: Option<PathBuf>,
        /// A configuration whose server.users_file is the file.
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum MirrorCommand {
    /// Translate consumer groups' committed offsets on a mirror's source
    /// into offsets on its target, exactly, with the mirror's offset map:
    /// each partition's target offset is that of the next record the group
    /// has not read. Prints them; with --apply, commits them for the same
    /// group on the target (refused while the group has members there).
    TranslateOffsets {
        /// The YAML configuration file holding the mirror.
        #[arg(long, short)]
        config: PathBuf,
        /// The mirror (its name under `mirrors:`).
        #[arg(long)]
        mirror: String,
        /// Regular expression of the groups on the source, matched against
        /// the whole name: `orders-app` or `orders-.*`.
        #[arg(long)]
        group: String,
        /// Commit the translated offsets on the target.
        #[arg(long)]
        apply: bool,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// The other way, to fail back: the groups' committed offsets on
        /// the target's mirrored topics, translated to the source topics
        /// they were copied from (--apply commits them on the source).
        #[arg(long)]
        back: bool,
    },
}

#[derive(Debug, Subcommand)]
enum UsersCommand {
    /// Add a user, or change a user's password. The password comes from
    /// --password-env, --password-file, or the first line of standard
    /// input; it is stored salted and hashed.
    Add {
        /// The user's name.
        name: String,
        /// SCRAM mechanisms to store a credential for (repeat the flag);
        /// default both. PLAIN logins are checked against either.
        #[arg(long = "mechanism", value_parser = parse_mechanism)]
        mechanisms: Vec<strait_config::SaslMechanism>,
        /// Key derivation iterations (4096 to 16384; Kafka's default 4096).
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        /// Read the password from this environment variable.
        #[arg(long)]
        password_env: Option<String>,
        /// Read the password from this file.
        #[arg(long)]
        password_file: Option<PathBuf>,
    },
    /// Remove a user.
    Remove {
        /// The user's name.
        name: String,
    },
    /// List the users and their mechanisms.
    List,
}

fn parse_mechanism(value: &str) -> Result<strait_config::SaslMechanism, String> {
    use strait_config::SaslMechanism::{ScramSha256, ScramSha512};
    match value.to_ascii_uppercase().as_str() {
        "SCRAM-SHA-256" => Ok(ScramSha256),
        "SCRAM-SHA-512" => Ok(ScramSha512),
        _ => Err(format!("`{value}`: use SCRAM-SHA-256 or SCRAM-SHA-512")),
    }
}

#[derive(Debug, Subcommand)]
enum SpoolCommand {
    /// Check every batch CRC, offset and index entry of a partition
    /// directory or of a whole data directory. Exits 1 on any problem.
    Verify {
        /// A partition directory (holding *.log files) or a data directory.
        dir: PathBuf,
    },
    /// Print the batches of a partition directory, like Kafka's dump-log
    /// tool.
    Dump {
        /// A partition directory (holding *.log files).
        dir: PathBuf,
        /// Skip batches that end before this offset.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Also print every record (offset, timestamp, key, value; values of
        /// compressed batches decompressed), like dump-log's
        /// --print-data-log.
        #[arg(long)]
        records: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRAIT_LOG").unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_current_span(true).with_span_list(false).init(),
    }
    let result = match cli.command {
        Command::Serve {
            config,
            listen,
            advertised,
            data_dir,
        } => serve::run(serve::Overrides {
            config,
            listen,
            advertised,
            data_dir,
        }),
        Command::Mirror {
            command:
                Some(MirrorCommand::TranslateOffsets {
                    config,
                    mirror,
                    group,
                    apply,
                    json,
                    back,
                }),
            ..
        } => mirror_cmd::translate_offsets(&mirror_cmd::Translate {
            config,
            mirror,
            group,
            apply,
            json,
            back,
        }),
        Command::Mirror {
            config: Some(config), ..
        } => mirror_cmd::run(&config),
        Command::Mirror { .. } => Err(anyhow::anyhow!(
            "strait mirror needs --config FILE (to run the mirrors) or a subcommand; see strait mirror --help"
        )),
        Command::Check { config } => check::run(&config),
        Command::Users {
            command,
            file,
            config,
        } => users_cmd::users_file(file, config).and_then(|path| match command {
            UsersCommand::Add {
                name,
                mechanisms,
                iterations,
                password_env,
                password_file,
            } => {
                let mechanisms = if mechanisms.is_empty() {
                    vec![
                        strait_config::SaslMechanism::ScramSha256,
                        strait_config::SaslMechanism::ScramSha512,
                    ]
                } else {
                    mechanisms
                };
                users_cmd::add(&path, &name, &mechanisms, iterations, password_env, password_file)
            }
            UsersCommand::Remove { name } => users_cmd::remove(&path, &name),
            UsersCommand::List => users_cmd::list(&path),
        }),
        Command::Spool(SpoolCommand::Verify { dir }) => spool_cmd::verify(&dir),
        Command::Spool(SpoolCommand::Dump { dir, from, records }) => spool_cmd::dump(&dir, from, records),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("strait: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
