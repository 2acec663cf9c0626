//! The users file (`server.users_file`): who may log in with SASL, and
//! their SCRAM credentials, salted and hashed as Kafka stores them
//! (RFC 5802: salt, iterations, StoredKey and ServerKey, never the
//! password). Plain data: `strait users` writes it and the gateway reads
//! it; the hashing lives with the SCRAM code.
//!
//! ```yaml
//! users:
//!   alice:
//!     SCRAM-SHA-512:
//!       salt: 5RFG0n0v3J5O4z7r0h5jfw==
//!       iterations: 4096
//!       stored_key: ...
//!       server_key: ...
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::security::SaslMechanism;

/// The whole users file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsersFile {
    /// Users by name.
    pub users: BTreeMap<String, User>,
}

/// One user's credentials, one per SCRAM mechanism (a user needs at least
/// one; PLAIN logins are checked against any of them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct User {
    /// The SCRAM-SHA-256 credential.
    #[serde(rename = "SCRAM-SHA-256", skip_serializing_if = "Option::is_none")]
    pub scram_sha_256: Option<ScramCredential>,
    /// The SCRAM-SHA-512 credential.
    #[serde(rename = "SCRAM-SHA-512", skip_serializing_if = "Option::is_none")]
    pub scram_sha_512: Option<ScramCredential>,
}

impl User {
    /// The credential for a SCRAM `mechanism`, if the user has one.
    pub fn scram(&self, mechanism: SaslMechanism) -> Option<&ScramCredential> {
        match mechanism {
            SaslMechanism::ScramSha256 => self.scram_sha_256.as_ref(),
            SaslMechanism::ScramSha512 => self.scram_sha_512.as_ref(),
            _ => None,
        }
    }

    /// The credential slot for a SCRAM `mechanism` (`None` for others).
    pub fn scram_mut(&mut self, mechanism: SaslMechanism) -> Option<&mut Option<ScramCredential>> {
        match mechanism {
            SaslMechanism::ScramSha256 => Some(&mut self.scram_sha_256),
            SaslMechanism::ScramSha512 => Some(&mut self.scram_sha_512),
            _ => None,
        }
    }
}

/// A SCRAM credential: the salt and iteration count, and the two keys
/// derived from the salted password (base64, as Kafka's `kafka-configs
/// --describe` shows them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScramCredential {
    /// The salt, base64.
    pub salt: String,
    /// Iterations of the key derivation (4096 to 16384, as Kafka allows).
    pub iterations: u32,
    /// H(ClientKey), base64.
    pub stored_key: String,
    /// HMAC(SaltedPassword, "Server Key"), base64.
    pub server_key: String,
}

impl UsersFile {
    /// Parses a users file's text.
    pub fn parse(text: &str) -> Result<UsersFile, String> {
        if text.trim().is_empty() {
            return Ok(UsersFile::default());
        }
        let file: UsersFile = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        for (name, user) in &file.users {
            if name.is_empty() || name.contains('\0') {
                return Err(format!(
                    "users.{name:?}: a user's name must not be empty or hold NUL"
                ));
            }
            if user.scram_sha_256.is_none() && user.scram_sha_512.is_none() {
                return Err(format!("users.{name}: has no credential"));
            }
        }
        Ok(file)
    }

    /// The file's text, with a header saying what it is.
    pub fn render(&self) -> String {
        let body = serde_yaml::to_string(self).expect("users serialize");
        format!(
            "# Strait users: SCRAM credentials (salted and hashed, RFC 5802).\n\
             # Written by `strait users`; read again by Strait when it changes.\n{body}"
        )
    }
}
