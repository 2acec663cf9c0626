//! The `strait` command line.
//!
//! - `strait check --config FILE`: validate a configuration, print it in full.
//! - `strait spool verify DIR`: check every batch and index entry on disk.
//! - `strait spool dump DIR [--from OFFSET]`: list the batches of a partition.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod spool_cmd;

#[derive(Debug, Parser)]
#[command(
    name = "strait",
    version,
    about = "Kafka protocol gateway and cross-datacenter mirror"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration file and print the effective configuration.
    Check {
        /// The YAML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Inspect spool data on disk (read-only).
    #[command(subcommand)]
    Spool(SpoolCommand),
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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { config } => check::run(&config),
        Command::Spool(SpoolCommand::Verify { dir }) => spool_cmd::verify(&dir),
        Command::Spool(SpoolCommand::Dump { dir, from }) => spool_cmd::dump(&dir, from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("strait: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
