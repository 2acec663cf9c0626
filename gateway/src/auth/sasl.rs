//! Strait's side of a client's SASL login: PLAIN (RFC 4616) and
//! SCRAM-SHA-256/512 (RFC 5802, 7677) checked against the users file.
//!
//! An exchange is a state machine fed one client message at a time
//! ([`Exchange::step`]). It is plain computation (PLAIN's check runs
//! PBKDF2: the caller runs steps off the async workers). Every refusal
//! tells the client the same thing, whether the user is unknown or the
//! password wrong, and a SCRAM exchange with an unknown user goes on with
//! made-up keys to its end, so that neither the answer nor its timing
//! shows which users exist. The reason for the log is kept apart.

use strait_config::SaslMechanism;
use strait_upstream::sasl::scram::{self, Credential, Hash};

use super::users::{hash_of, UserMap};

/// What one client message leads to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this challenge and wait for the next message.
    Challenge(Vec<u8>),
    /// Logged in as this user; send the last server message (empty for
    /// PLAIN).
    Done { user: String, last: Vec<u8> },
    /// Refused: why, for the log (the client is told only that its
    /// credentials were wrong).
    Refused(String),
}

/// One login in progress.
#[derive(Debug)]
pub struct Exchange {
    mechanism: SaslMechanism,
    state: State,
}

#[derive(Debug)]
enum State {
    Start,
    /// SCRAM: the server-first message was sent.
    SentFirst(Box<SentFirst>),
    Finished,
}

/// What a SCRAM exchange keeps between its two client messages.
#[derive(Debug)]
struct SentFirst {
    hash: Hash,
    user: String,
    /// `None` for a user who does not exist (made-up keys were sent).
    credential: Option<Credential>,
    /// The client's GS2 header, which its final message must bind.
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl Exchange {
    /// A login with `mechanism` (PLAIN or a SCRAM one).
    pub fn new(mechanism: SaslMechanism) -> Exchange {
        Exchange {
            mechanism,
            state: State::Start,
        }
    }

    /// The mechanism.
    pub fn mechanism(&self) -> SaslMechanism {
        self.mechanism
    }

    /// Takes the client's next message.
    pub fn step(&mut self, users: &UserMap, message: &[u8]) -> Step {
        let state = std::mem::replace(&mut self.state, State::Finished);
        match (state, hash_of(self.mechanism)) {
            (State::Start, None) => plain(users, message),
            (State::Start, Some(hash)) => match self.scram_first(hash, users, message) {
                Ok(challenge) => Step::Challenge(challenge),
                Err(why) => Step::Refused(why),
            },
            (State::SentFirst(sent), _) => match scram_final(&sent, message) {
                Ok(last) => Step::Done {
                    user: sent.user,
                    last,
                },
                Err(why) => Step::Refused(format!("user {:?}: {why}", sent.user)),
            },
            (State::Finished, _) => Step::Refused("a message after the exchange ended".to_owned()),
        }
    }

    fn scram_first(&mut self, hash: Hash, users: &UserMap, message: &[u8]) -> Result<Vec<u8>, String> {
        let first = scram::parse_client_first(message)?;
        if first.token_auth {
            return Err("delegation tokens (tokenauth) are not supported".to_owned());
        }
        let text = std::str::from_utf8(message).expect("parsed as UTF-8 above");
        let gs2_header = text[..text.len() - first.bare.len()].to_owned();
        let credential = users.get(&first.username).and_then(|c| c.scram(hash)).cloned();
        // An unknown user gets a salt and count like a real one's.
        let (salt, iterations) = match &credential {
            Some(c) => (c.salt.clone(), c.iterations),
            None => (scram::random_bytes(32), scram::MIN_ITERATIONS),
        };
        let nonce = format!("{}{}", first.nonce, scram::nonce());
        let server_first = format!(
            "r={nonce},s={},i={iterations}",
            strait_upstream::sasl::base64(&salt)
        );
        let challenge = server_first.clone().into_bytes();
        self.state = State::SentFirst(Box::new(SentFirst {
            hash,
            user: first.username,
            credential,
            gs2_header,
            client_first_bare: first.bare,
            server_first,
            nonce,
        }));
        Ok(challenge)
    }
}

/// PLAIN: `[authzid] NUL user NUL password`.
fn plain(users: &UserMap, message: &[u8]) -> Step {
    let mut parts = message.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Step::Refused("a PLAIN message is not authzid NUL user NUL password".to_owned());
    };
    let (Ok(authzid), Ok(user)) = (std::str::from_utf8(authzid), std::str::from_utf8(user)) else {
        return Step::Refused("a PLAIN user name is not UTF-8".to_owned());
    };
    if !authzid.is_empty() && authzid != user {
        return Step::Refused(format!(
            "authorization identity {authzid:?} differs from the user {user:?}"
        ));
    }
    match users.get(user) {
        Some(credentials) if credentials.password_matches(password) => Step::Done {
            user: user.to_owned(),
            last: Vec::new(),
        },
        Some(_) => Step::Refused(format!("user {user:?}: wrong password")),
        None => Step::Refused(format!("user {user:?} does not exist")),
    }
}

/// SCRAM's client-final message: checks the proof, answers with the
/// server's signature.
fn scram_final(sent: &SentFirst, message: &[u8]) -> Result<Vec<u8>, String> {
    let hash = sent.hash;
    let last = scram::parse_client_final(message)?;
    if last.channel_binding != strait_upstream::sasl::base64(sent.gs2_header.as_bytes()) {
        return Err("the channel binding differs from the client-first message's header".to_owned());
    }
    if last.nonce != sent.nonce {
        return Err("the nonce differs from the one Strait sent".to_owned());
    }
    let Some(credential) = &sent.credential else {
        return Err("no such user".to_owned());
    };
    let auth_message = format!(
        "{},{},{}",
        sent.client_first_bare, sent.server_first, last.without_proof
    );
    let client_signature = hash.mac(&credential.stored_key, auth_message.as_bytes());
    if last.proof.len() != client_signature.len() {
        return Err("the proof has the wrong length".to_owned());
    }
    let client_key = scram::xor(&last.proof, &client_signature);
    if !scram::same(&hash.hash(&client_key), &credential.stored_key) {
        return Err("wrong password".to_owned());
    }
    let server_signature = hash.mac(&credential.server_key, auth_message.as_bytes());
    Ok(format!("v={}", strait_upstream::sasl::base64(&server_signature)).into_bytes())
}

#[cfg(test)]
mod tests {
    use strait_upstream::sasl::scram::Client;

    use super::*;
    use crate::auth::users::decode;

    fn users() -> UserMap {
        let mut file = strait_config::UsersFile::default();
        let user = strait_config::User {
            scram_sha_256: Some(
                crate::auth::users::new_credential(SaslMechanism::ScramSha256, "pw", 4096).unwrap(),
            ),
            ..Default::default()
        };
        file.users.insert("ann,=x".into(), user);
        decode(&file.render()).unwrap()
    }

    fn login(password: &str, user: &str) -> Step {
        let users = users();
        let mut client = Client::new(Hash::Sha256, user, password.to_owned());
        let mut server = Exchange::new(SaslMechanism::ScramSha256);
        let Step::Challenge(first) = server.step(&users, &client.first()) else {
            panic!("no challenge")
        };
        match client.answer(&first) {
            Ok(Some(last)) => server.step(&users, &last),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn scram_logs_in_with_the_client_of_the_upstream_side() {
        let users = users();
        let mut client = Client::new(Hash::Sha256, "ann,=x", "pw".to_owned());
        let mut server = Exchange::new(SaslMechanism::ScramSha256);
        let Step::Challenge(first) = server.step(&users, &client.first()) else {
            panic!()
        };
        let last = client.answer(&first).unwrap().unwrap();
        let Step::Done { user, last } = server.step(&users, &last) else {
            panic!()
        };
        assert_eq!(user, "ann,=x");
        // The client checks the server's signature.
        assert_eq!(client.answer(&last).unwrap(), None);
    }

    #[test]
    fn scram_refuses_a_wrong_password_and_an_unknown_user_alike() {
        assert!(matches!(login("nope", "ann,=x"), Step::Refused(why) if why.contains("wrong password")));
        assert!(matches!(login("pw", "bob"), Step::Refused(why) if why.contains("no such user")));
    }

    #[test]
    fn scram_refuses_a_wrong_nonce_and_garbage() {
        let users = users();
        let mut server = Exchange::new(SaslMechanism::ScramSha256);
        let Step::Challenge(_) = server.step(&users, b"n,,n=ann=2C=3Dx,r=abc") else {
            panic!()
        };
        let step = server.step(&users, b"c=biws,r=abcWRONG,p=AAAA");
        assert!(matches!(step, Step::Refused(why) if why.contains("nonce")),);
        for garbage in [
            &b""[..],
            b"\xff\xfe",
            b"n,,",
            b"y,,n=a,r=b",
            b"n,,n=a",
            b"n,,n=a,r=",
        ] {
            let mut server = Exchange::new(SaslMechanism::ScramSha512);
            assert!(
                matches!(server.step(&users, garbage), Step::Refused(_)),
                "{garbage:?}"
            );
        }
        // A message after the end is refused.
        assert!(matches!(server.step(&users, b"x"), Step::Refused(_)));
    }

    #[test]
    fn plain_checks_the_password_against_the_stored_keys() {
        let users = users();
        let ok = Exchange::new(SaslMechanism::Plain).step(&users, b"\0ann,=x\0pw");
        assert_eq!(
            ok,
            Step::Done {
                user: "ann,=x".into(),
                last: vec![]
            }
        );
        for bad in [
            &b"\0ann,=x\0pw2"[..],
            b"\0bob\0pw",
            b"other\0ann,=x\0pw",
            b"ann",
            b"\0a\0b\0c",
        ] {
            let step = Exchange::new(SaslMechanism::Plain).step(&users, bad);
            assert!(matches!(step, Step::Refused(_)), "{bad:?}");
        }
    }
}
