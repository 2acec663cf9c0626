//! `strait users`: adds, changes, removes and lists the users who log in
//! with SASL, in the users file (`server.users_file`). Passwords are
//! stored as Kafka stores SCRAM credentials (salt, iterations, StoredKey,
//! ServerKey), never as they are; a running Strait reads the file again
//! within a second of a change.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use strait_config::{Config, SaslMechanism, User, UsersFile};
use strait_gateway::auth::users::new_credential;

/// Where the users file is: `--file`, or the `server.users_file` of
/// `--config`.
pub fn users_file(file: Option<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match (file, config) {
        (Some(file), None) => Ok(file),
        (None, Some(config)) => {
            let config = Config::load(&config)?;
            config
                .server
                .users_file
                .context("the configuration sets no server.users_file: name the file with --file")
        }
        _ => bail!(
            "name the users file with --file FILE, or the configuration that names it with --config FILE"
        ),
    }
}

fn read(path: &Path) -> anyhow::Result<UsersFile> {
    match std::fs::read_to_string(path) {
        Ok(text) => UsersFile::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(UsersFile::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes the file whole or not at all (a running Strait never reads half
/// of it), readable by its owner only.
fn write(path: &Path, users: &UsersFile) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(users.render().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

/// The password: from an environment variable, a file, or the first line
/// of standard input.
fn password(env: Option<String>, file: Option<PathBuf>) -> anyhow::Result<String> {
    let password = match (env, file) {
        (Some(name), None) => std::env::var(&name).with_context(|| format!("environment variable {name}"))?,
        (None, Some(path)) => std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim_end_matches(['\r', '\n'])
            .to_owned(),
        (None, None) => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the password from standard input")?;
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
        (Some(_), Some(_)) => bail!("give the password one way: --password-env or --password-file"),
    };
    if password.is_empty() {
        bail!("the password is empty");
    }
    Ok(password)
}

/// Adds `name`, or sets the credentials of `mechanisms` of an existing
/// user (their other credentials stay).
pub fn add(
    path: &Path,
    name: &str,
    mechanisms: &[SaslMechanism],
    iterations: u32,
    password_env: Option<String>,
    password_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    if name.is_empty() || name.contains('\0') {
        bail!("`{name}` cannot be a user's name: it must not be empty or hold NUL");
    }
    let password = password(password_env, password_file)?;
    let mut users = read(path)?;
    let existed = users.users.contains_key(name);
    let user = users.users.entry(name.to_owned()).or_insert_with(User::default);
    for &mechanism in mechanisms {
        let credential = new_credential(mechanism, &password, iterations).map_err(anyhow::Error::msg)?;
        *user
            .scram_mut(mechanism)
            .expect("new_credential accepted a SCRAM mechanism") = Some(credential);
    }
    write(path, &users)?;
    let names: Vec<_> = mechanisms.iter().map(|m| m.name()).collect();
    println!(
        "{} user {name} ({}) in {}",
        if existed { "updated" } else { "added" },
        names.join(", "),
        path.display()
    );
    Ok(())
}

/// Removes `name`.
pub fn remove(path: &Path, name: &str) -> anyhow::Result<()> {
    let mut users = read(path)?;
    if users.users.remove(name).is_none() {
        bail!("{}: there is no user {name}", path.display());
    }
    write(path, &users)?;
    println!("removed user {name} from {}", path.display());
    Ok(())
}

/// Lists the users and their mechanisms.
pub fn list(path: &Path) -> anyhow::Result<()> {
    let users = read(path)?;
    let mut out = std::io::stdout().lock();
    for (name, user) in &users.users {
        let mechanisms: Vec<_> = [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512]
            .into_iter()
            .filter(|m| user.scram(*m).is_some())
            .map(|m| format!("{m} (iterations {})", user.scram(m).expect("filtered").iterations))
            .collect();
        writeln!(out, "{name}: {}", mechanisms.join(", "))?;
    }
    Ok(())
}
