//! `strait check`: load and validate a configuration file, then print the
//! effective configuration (every default written out) as YAML. Clusters'
//! TLS files are read too; the configuration holds no secret, only where
//! each is (an environment variable or a file), and so prints none.

use std::io::Write;
use std::path::Path;

use strait_config::Config;

/// Loads and validates `config`, then prints the effective configuration to
/// stdout, preceded by a comment naming the file. Errors (unreadable file,
/// bad YAML, unknown key, invalid value) name the file and the key.
pub fn run(config: &Path) -> anyhow::Result<()> {
    let loaded = Config::load(config)?;
    // Each cluster's and listener's certificate and key files, and the
    // users file, read as a start would read them (secrets are read only
    // when connecting).
    strait_gateway::launch::check_files(&loaded)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "# effective configuration of {}", config.display())?;
    out.write_all(loaded.to_yaml().as_bytes())?;
    out.flush()?;
    Ok(())
}
