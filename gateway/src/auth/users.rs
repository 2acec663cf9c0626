//! The users who may log in with SASL (`server.users_file`), read at start
//! and again whenever the file changes: a user added with `strait users`
//! can log in within a second, without a restart. A file that stops
//! parsing is logged and the users read before are kept.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use strait_config::{SaslMechanism, ScramCredential, UsersFile};
use strait_upstream::sasl::scram::{self, Credential, Hash};

/// How often at most the file's modification time is looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One user's decoded credentials.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    sha256: Option<Credential>,
    sha512: Option<Credential>,
}

impl Credentials {
    /// The credential of a SCRAM hash.
    pub fn scram(&self, hash: Hash) -> Option<&Credential> {
        match hash {
            Hash::Sha256 => self.sha256.as_ref(),
            Hash::Sha512 => self.sha512.as_ref(),
        }
    }

    /// Whether `password` is the user's (checked against the strongest
    /// credential: PBKDF2, so run it off the async workers).
    pub fn password_matches(&self, password: &[u8]) -> bool {
        let (hash, credential) = match (&self.sha512, &self.sha256) {
            (Some(c), _) => (Hash::Sha512, c),
            (None, Some(c)) => (Hash::Sha256, c),
            (None, None) => return false,
        };
        let Some(iterations) = NonZeroU32::new(credential.iterations) else {
            return false;
        };
        let derived = Credential::new(hash, password, &credential.salt, iterations);
        scram::same(&derived.stored_key, &credential.stored_key)
    }
}

/// The users by name.
pub type UserMap = HashMap<String, Credentials>;

/// The users file and what was last read from it.
#[derive(Debug)]
pub struct Users {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    users: Arc<UserMap>,
    /// The modification time of the file as last read (or found bad).
    modified: Option<SystemTime>,
    checked: Instant,
}

impl Users {
    /// Reads `path`; an error names the file and what is wrong.
    pub fn open(path: &Path) -> Result<Users, String> {
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read {}: {e} (create it with `strait users add`)",
                path.display()
            )
        })?;
        let users = decode(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Users {
            path: path.to_owned(),
            state: Mutex::new(State {
                users: Arc::new(users),
                modified,
                checked: Instant::now(),
            }),
        })
    }

    /// The current users, read again first if the file changed.
    pub async fn current(&self) -> Arc<UserMap> {
        let (users, due, known) = {
            let state = self.state.lock().expect("users lock");
            (
                Arc::clone(&state.users),
                state.checked.elapsed() >= CHECK_EVERY,
                state.modified,
            )
        };
        if !due {
            return users;
        }
        let modified = tokio::fs::metadata(&self.path)
            .await
            .and_then(|m| m.modified())
            .ok();
        let mut fresh = None;
        if modified != known {
            match tokio::fs::read_to_string(&self.path).await {
                Ok(text) => match decode(&text) {
                    Ok(read) => {
                        tracing::info!(file = %self.path.display(), users = read.len(), "users file read again");
                        fresh = Some(Arc::new(read));
                    }
                    Err(e) => tracing::warn!(
                        file = %self.path.display(),
                        "the users file no longer parses; keeping the users read before: {e}"
                    ),
                },
                Err(e) => tracing::warn!(
                    file = %self.path.display(),
                    "cannot read the users file; keeping the users read before: {e}"
                ),
            }
        }
        let mut state = self.state.lock().expect("users lock");
        state.checked = Instant::now();
        state.modified = modified;
        if let Some(fresh) = fresh {
            state.users = fresh;
        }
        Arc::clone(&state.users)
    }

    /// The users' names as read last (for bounding metric labels).
    pub fn names(&self) -> Vec<String> {
        self.state
            .lock()
            .expect("users lock")
            .users
            .keys()
            .cloned()
            .collect()
    }
}

/// The users of a file's text, their keys decoded.
pub fn decode(text: &str) -> Result<UserMap, String> {
    let file = UsersFile::parse(text)?;
    file.users
        .iter()
        .map(|(name, user)| {
            let one = |mechanism: SaslMechanism| -> Result<Option<Credential>, String> {
                user.scram(mechanism)
                    .map(|c| credential(c).map_err(|e| format!("users.{name}.{mechanism}: {e}")))
                    .transpose()
            };
            Ok((
                name.clone(),
                Credentials {
                    sha256: one(SaslMechanism::ScramSha256)?,
                    sha512: one(SaslMechanism::ScramSha512)?,
                },
            ))
        })
        .collect()
}

fn credential(stored: &ScramCredential) -> Result<Credential, String> {
    let b64 = |field: &str, value: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(value)
            .map_err(|e| format!("{field} is not base64: {e}"))
    };
    if !(scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&stored.iterations) {
        return Err(format!(
            "iterations {} is outside {}..{}",
            stored.iterations,
            scram::MIN_ITERATIONS,
            scram::MAX_ITERATIONS
        ));
    }
    Ok(Credential {
        salt: b64("salt", &stored.salt)?,
        stored_key: b64("stored_key", &stored.stored_key)?,
        server_key: b64("server_key", &stored.server_key)?,
        iterations: stored.iterations,
    })
}

/// The stored form of `password` for `mechanism` (a SCRAM one), with a
/// fresh salt: what `strait users add` writes.
pub fn new_credential(
    mechanism: SaslMechanism,
    password: &str,
    iterations: u32,
) -> Result<ScramCredential, String> {
    let hash = hash_of(mechanism)
        .ok_or_else(|| format!("{mechanism} has no stored credential: use SCRAM-SHA-256 or SCRAM-SHA-512"))?;
    if !(scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&iterations) {
        return Err(format!(
            "iterations must be from {} to {}",
            scram::MIN_ITERATIONS,
            scram::MAX_ITERATIONS
        ));
    }
    let salt = scram::random_bytes(32);
    let rounds = NonZeroU32::new(iterations).expect("checked above");
    let credential = Credential::new(hash, password.as_bytes(), &salt, rounds);
    let b64 = strait_upstream::sasl::base64;
    Ok(ScramCredential {
        salt: b64(&credential.salt),
        iterations,
        stored_key: b64(&credential.stored_key),
        server_key: b64(&credential.server_key),
    })
}

/// The SCRAM hash of a mechanism (`None` for PLAIN and OAUTHBEARER).
pub fn hash_of(mechanism: SaslMechanism) -> Option<Hash> {
    match mechanism {
        SaslMechanism::ScramSha256 => Some(Hash::Sha256),
        SaslMechanism::ScramSha512 => Some(Hash::Sha512),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_credential_reads_back_and_checks_its_password() {
        let mut file = UsersFile::default();
        let user = strait_config::User {
            scram_sha_512: Some(new_credential(SaslMechanism::ScramSha512, "s3cret", 4096).unwrap()),
            ..Default::default()
        };
        file.users.insert("alice".into(), user);
        let users = decode(&file.render()).unwrap();
        let alice = &users["alice"];
        assert!(alice.scram(Hash::Sha512).is_some());
        assert!(alice.scram(Hash::Sha256).is_none());
        assert!(alice.password_matches(b"s3cret"));
        assert!(!alice.password_matches(b"s3cret "));
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let e = decode("users:\n  bob: {}\n").unwrap_err();
        assert!(e.contains("users.bob: has no credential"), "{e}");
        let e = decode(
            "users:\n  bob:\n    SCRAM-SHA-256: {salt: '!!', iterations: 4096, stored_key: '', server_key: ''}\n",
        )
        .unwrap_err();
        assert!(e.contains("users.bob.SCRAM-SHA-256: salt is not base64"), "{e}");
        let e = decode(
            "users:\n  bob:\n    SCRAM-SHA-256: {salt: '', iterations: 10, stored_key: '', server_key: ''}\n",
        )
        .unwrap_err();
        assert!(e.contains("iterations 10 is outside 4096..16384"), "{e}");
        assert!(new_credential(SaslMechanism::Plain, "x", 4096).is_err());
    }
}
