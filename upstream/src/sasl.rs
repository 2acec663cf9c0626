//! SASL mechanisms as Kafka speaks them inside SaslAuthenticate (KIP-152):
//! PLAIN (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677,
//! KIP-84) and OAUTHBEARER (RFC 7628, KIP-255), from the client's side.
//!
//! [`ClientMechanism`] is the client's half of one exchange: the first
//! message, then an answer to each challenge until the server is done. The
//! SCRAM message parsers and the key derivation ([`scram`]) are public so
//! a server side and the fuzz target use the same code.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use strait_config::SaslMechanism;

/// What went wrong in an exchange, in words for the error message.
pub type SaslResult<T> = std::result::Result<T, String>;

/// The client's half of one SASL exchange.
#[derive(Debug)]
pub enum ClientMechanism {
    /// PLAIN: one message, `\0user\0password`.
    Plain {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
    /// SCRAM, in one of its steps.
    Scram(scram::Client),
    /// OAUTHBEARER: the token in the first message.
    OAuthBearer {
        /// The JWT.
        token: String,
        /// The server's error, once it sent one (it then waits for `%x01`
        /// before failing the exchange).
        refused: Option<String>,
    },
}

impl ClientMechanism {
    /// A new exchange. `secret` is the password, or the token for
    /// OAUTHBEARER.
    pub fn new(mechanism: SaslMechanism, username: &str, secret: String) -> ClientMechanism {
        match mechanism {
            SaslMechanism::Plain => ClientMechanism::Plain {
                username: username.to_owned(),
                password: secret,
            },
            SaslMechanism::ScramSha256 => {
                ClientMechanism::Scram(scram::Client::new(scram::Hash::Sha256, username, secret))
            }
            SaslMechanism::ScramSha512 => {
                ClientMechanism::Scram(scram::Client::new(scram::Hash::Sha512, username, secret))
            }
            SaslMechanism::OAuthBearer => ClientMechanism::OAuthBearer {
                token: secret,
                refused: None,
            },
        }
    }

    /// The client's first message.
    pub fn first(&mut self) -> Vec<u8> {
        match self {
            ClientMechanism::Plain { username, password } => {
                let mut out = Vec::with_capacity(2 + username.len() + password.len());
                out.push(0);
                out.extend_from_slice(username.as_bytes());
                out.push(0);
                out.extend_from_slice(password.as_bytes());
                out
            }
            ClientMechanism::Scram(client) => client.first(),
            ClientMechanism::OAuthBearer { token, .. } => {
                format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
            }
        }
    }

    /// The answer to the server's `challenge` (the auth bytes of a
    /// successful SaslAuthenticate), or `None` when the exchange is
    /// complete and the server is trusted.
    pub fn answer(&mut self, challenge: &[u8]) -> SaslResult<Option<Vec<u8>>> {
        match self {
            ClientMechanism::Plain { .. } if challenge.is_empty() => Ok(None),
            ClientMechanism::Plain { .. } => Err("the server sent a challenge to PLAIN".to_owned()),
            ClientMechanism::Scram(client) => client.answer(challenge),
            ClientMechanism::OAuthBearer { refused, .. } => {
                if challenge.is_empty() && refused.is_none() {
                    return Ok(None);
                }
                if refused.is_some() {
                    return Err("the server went on after refusing the token".to_owned());
                }
                // RFC 7628 3.2.2: an error is sent as a challenge, which the
                // client acknowledges with %x01; the server then fails.
                *refused = Some(String::from_utf8_lossy(challenge).into_owned());
                Ok(Some(vec![1]))
            }
        }
    }

    /// What the server said when it refused a token, if it did.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            ClientMechanism::OAuthBearer { refused, .. } => refused.as_deref(),
            _ => None,
        }
    }
}

/// SCRAM (RFC 5802) with SHA-256 or SHA-512, as Kafka uses it.
pub mod scram {
    use std::num::NonZeroU32;

    use ring::{digest, hmac, pbkdf2, rand};

    use super::{SaslResult, BASE64};
    use base64::Engine as _;

    /// Fewest iterations accepted, as Kafka's clients (a server asking for
    /// fewer would weaken the stored keys).
    pub const MIN_ITERATIONS: u32 = 4096;
    /// Most iterations accepted: Kafka stores no more, and a server asking
    /// for more would have the client spin.
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The hash function of a SCRAM mechanism.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Hash {
        /// SCRAM-SHA-256.
        Sha256,
        /// SCRAM-SHA-512.
        Sha512,
    }

    impl Hash {
        fn hmac(self) -> hmac::Algorithm {
            match self {
                Hash::Sha256 => hmac::HMAC_SHA256,
                Hash::Sha512 => hmac::HMAC_SHA512,
            }
        }

        fn pbkdf2(self) -> pbkdf2::Algorithm {
            match self {
                Hash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
                Hash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
            }
        }

        fn digest(self) -> &'static digest::Algorithm {
            match self {
                Hash::Sha256 => &digest::SHA256,
                Hash::Sha512 => &digest::SHA512,
            }
        }

        fn len(self) -> usize {
            match self {
                Hash::Sha256 => 32,
                Hash::Sha512 => 64,
            }
        }

        /// `HMAC(key, data)`.
        pub fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
            hmac::sign(&hmac::Key::new(self.hmac(), key), data)
                .as_ref()
                .to_vec()
        }

        /// `H(data)`.
        pub fn hash(self, data: &[u8]) -> Vec<u8> {
            digest::digest(self.digest(), data).as_ref().to_vec()
        }

        /// `Hi(password, salt, iterations)`: PBKDF2 with this HMAC.
        pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
            let mut out = vec![0; self.len()];
            pbkdf2::derive(self.pbkdf2(), iterations, salt, password, &mut out);
            out
        }
    }

    /// The keys a server stores for a user (Kafka's `ScramCredential`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Credential {
        /// The salt.
        pub salt: Vec<u8>,
        /// `H(ClientKey)`.
        pub stored_key: Vec<u8>,
        /// `HMAC(SaltedPassword, "Server Key")`.
        pub server_key: Vec<u8>,
        /// PBKDF2 iterations.
        pub iterations: u32,
    }

    impl Credential {
        /// The credential of `password` with `salt` and `iterations`.
        pub fn new(hash: Hash, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Credential {
            let salted = hash.salted_password(password, salt, iterations);
            Credential {
                salt: salt.to_vec(),
                stored_key: hash.hash(&hash.mac(&salted, b"Client Key")),
                server_key: hash.mac(&salted, b"Server Key"),
                iterations: iterations.get(),
            }
        }
    }

    /// A fresh nonce: 24 random bytes, base64 (printable, no comma).
    pub fn nonce() -> String {
        BASE64.encode(random_bytes(24))
    }

    /// `n` bytes from the system's secure random source (nonces, salts).
    pub fn random_bytes(n: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; n];
        rand::SecureRandom::fill(&rand::SystemRandom::new(), &mut bytes).expect("the system's random source");
        bytes
    }

    /// A `saslname` (RFC 5802 5.1): `=` and `,` escaped.
    pub fn escape(name: &str) -> String {
        name.replace('=', "=3D").replace(',', "=2C")
    }

    /// The name of an escaped `saslname`, or `None` for a bad escape.
    pub fn unescape(name: &str) -> Option<String> {
        let mut out = String::with_capacity(name.len());
        let mut rest = name;
        while let Some(at) = rest.find('=') {
            out.push_str(&rest[..at]);
            match rest.get(at..at + 3) {
                Some("=3D") => out.push('='),
                Some("=2C") => out.push(','),
                _ => return None,
            }
            rest = &rest[at + 3..];
        }
        out.push_str(rest);
        Some(out)
    }

    /// The `k=v` attributes of a SCRAM message, in order. Fails on a part
    /// that is not a name of letters, `=` and a value. (RFC 5802 names
    /// its attributes with one letter; Kafka's extensions, such as
    /// `tokenauth`, with words.)
    pub fn attributes(message: &str) -> SaslResult<Vec<(&str, &str)>> {
        message
            .split(',')
            .map(|part| match part.split_once('=') {
                Some((k, v)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic()) => Ok((k, v)),
                _ => Err(format!("`{part}` is not a SCRAM attribute")),
            })
            .collect()
    }

    /// A parsed server-first message.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ServerFirst {
        /// The client's nonce and the server's after it.
        pub nonce: String,
        /// The user's salt.
        pub salt: Vec<u8>,
        /// PBKDF2 iterations.
        pub iterations: u32,
    }

    /// Parses a server-first message: `r=nonce,s=salt,i=iterations`, and
    /// optional extensions after those.
    pub fn parse_server_first(message: &[u8]) -> SaslResult<ServerFirst> {
        let text =
            std::str::from_utf8(message).map_err(|_| "the server-first message is not UTF-8".to_owned())?;
        let attrs = attributes(text)?;
        match attrs.as_slice() {
            [("r", nonce), ("s", salt), ("i", iterations), ..] => Ok(ServerFirst {
                nonce: (*nonce).to_owned(),
                salt: BASE64
                    .decode(salt)
                    .map_err(|e| format!("the server's salt is not base64: {e}"))?,
                iterations: iterations
                    .parse()
                    .map_err(|_| format!("the server's iteration count `{iterations}` is not a number"))?,
            }),
            [("m", _), ..] => Err("the server wants a SCRAM extension this client does not know".to_owned()),
            _ => Err(format!("`{text}` is not a SCRAM server-first message")),
        }
    }

    /// A parsed client-first message (after the GS2 header `n,,`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClientFirst {
        /// The user, unescaped.
        pub username: String,
        /// The client's nonce.
        pub nonce: String,
        /// The message after the GS2 header, as it enters the signatures.
        pub bare: String,
        /// Whether the `tokenauth=true` extension (delegation tokens) was
        /// asked for.
        pub token_auth: bool,
    }

    /// Parses a client-first message. Channel binding is refused (Kafka
    /// does not offer it), as is an authorization identity other than the
    /// user.
    pub fn parse_client_first(message: &[u8]) -> SaslResult<ClientFirst> {
        let text =
            std::str::from_utf8(message).map_err(|_| "the client-first message is not UTF-8".to_owned())?;
        let (gs2, bare) = match text.strip_prefix("n,") {
            Some(rest) => match rest.split_once(',') {
                Some((authzid, bare)) => (authzid, bare),
                None => return Err("the client-first message ends inside its header".to_owned()),
            },
            None if text.starts_with("y,") || text.starts_with("p=") => {
                return Err("channel binding is not supported".to_owned())
            }
            None => return Err("the client-first message does not start with a GS2 header".to_owned()),
        };
        let attrs = attributes(bare)?;
        let (username, nonce, extensions) = match attrs.as_slice() {
            [("n", name), ("r", nonce), rest @ ..] => (*name, *nonce, rest),
            _ => return Err(format!("`{bare}` is not a SCRAM client-first message")),
        };
        let username =
            unescape(username).ok_or_else(|| format!("bad escape in the user name `{username}`"))?;
        if !gs2.is_empty() {
            let authzid = gs2
                .strip_prefix("a=")
                .and_then(unescape)
                .ok_or_else(|| format!("`{gs2}` is not an authorization identity"))?;
            if authzid != username {
                return Err(format!(
                    "authorization identity {authzid} differs from the user {username}"
                ));
            }
        }
        if nonce.is_empty() {
            return Err("the client's nonce is empty".to_owned());
        }
        let token_auth = extensions.iter().any(|&(k, v)| k == "tokenauth" && v == "true");
        Ok(ClientFirst {
            username,
            nonce: nonce.to_owned(),
            bare: bare.to_owned(),
            token_auth,
        })
    }

    /// A parsed client-final message.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ClientFinal {
        /// The channel binding attribute, base64 (`biws` for `n,,`).
        pub channel_binding: String,
        /// The combined nonce.
        pub nonce: String,
        /// The message without its proof, as it enters the signatures.
        pub without_proof: String,
        /// The client's proof.
        pub proof: Vec<u8>,
    }

    /// Parses a client-final message: `c=...,r=...[,extensions],p=proof`.
    pub fn parse_client_final(message: &[u8]) -> SaslResult<ClientFinal> {
        let text =
            std::str::from_utf8(message).map_err(|_| "the client-final message is not UTF-8".to_owned())?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| "the client-final message has no proof".to_owned())?;
        let attrs = attributes(without_proof)?;
        let (channel_binding, nonce) = match attrs.as_slice() {
            [("c", c), ("r", r), ..] => (*c, *r),
            _ => return Err(format!("`{without_proof}` is not a SCRAM client-final message")),
        };
        Ok(ClientFinal {
            channel_binding: channel_binding.to_owned(),
            nonce: nonce.to_owned(),
            without_proof: without_proof.to_owned(),
            proof: BASE64
                .decode(proof)
                .map_err(|e| format!("the client's proof is not base64: {e}"))?,
        })
    }

    /// Parses a server-final message: the server's signature, or its
    /// error.
    pub fn parse_server_final(message: &[u8]) -> SaslResult<Vec<u8>> {
        let text =
            std::str::from_utf8(message).map_err(|_| "the server-final message is not UTF-8".to_owned())?;
        match attributes(text)?.as_slice() {
            [("v", signature), ..] => BASE64
                .decode(signature)
                .map_err(|e| format!("the server's signature is not base64: {e}")),
            [("e", error), ..] => Err(format!("the server refused: {error}")),
            _ => Err(format!("`{text}` is not a SCRAM server-final message")),
        }
    }

    /// Whether `a` and `b` are equal, in time that depends only on their
    /// lengths.
    pub fn same(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// `a XOR b`, for equal lengths.
    pub fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
        a.iter().zip(b).map(|(x, y)| x ^ y).collect()
    }

    /// The client's side of one SCRAM exchange.
    #[derive(Debug)]
    pub struct Client {
        hash: Hash,
        username: String,
        password: String,
        nonce: String,
        step: Step,
    }

    #[derive(Debug)]
    enum Step {
        Start,
        SentFirst { bare: String },
        SentFinal { server_signature: Vec<u8> },
        Done,
    }

    impl Client {
        /// A new exchange for `username` with `password`.
        pub fn new(hash: Hash, username: &str, password: String) -> Client {
            Client {
                hash,
                username: username.to_owned(),
                password,
                nonce: nonce(),
                step: Step::Start,
            }
        }

        /// [`Client::first`] with a given nonce (RFC test vectors).
        #[cfg(test)]
        pub(crate) fn first_for_test(&mut self, nonce: &str) -> Vec<u8> {
            self.nonce = nonce.to_owned();
            self.first()
        }

        /// `n,,n=user,r=nonce`.
        pub fn first(&mut self) -> Vec<u8> {
            let bare = format!("n={},r={}", escape(&self.username), self.nonce);
            let message = format!("n,,{bare}").into_bytes();
            self.step = Step::SentFirst { bare };
            message
        }

        /// The client-final message for a server-first challenge; `None`
        /// once the server-final message proved the server knows the
        /// password.
        pub fn answer(&mut self, challenge: &[u8]) -> SaslResult<Option<Vec<u8>>> {
            match std::mem::replace(&mut self.step, Step::Done) {
                Step::SentFirst { bare } => {
                    let first = parse_server_first(challenge)?;
                    if !first.nonce.starts_with(&self.nonce) || first.nonce.len() == self.nonce.len() {
                        return Err("the server's nonce does not extend the client's".to_owned());
                    }
                    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&first.iterations) {
                        return Err(format!(
                            "the server asks for {} iterations; accepted are {MIN_ITERATIONS} to {MAX_ITERATIONS}",
                            first.iterations
                        ));
                    }
                    let iterations = NonZeroU32::new(first.iterations).expect("at least MIN_ITERATIONS");
                    let salted = self
                        .hash
                        .salted_password(self.password.as_bytes(), &first.salt, iterations);
                    let client_key = self.hash.mac(&salted, b"Client Key");
                    let stored_key = self.hash.hash(&client_key);
                    let server_key = self.hash.mac(&salted, b"Server Key");
                    let without_proof = format!("c=biws,r={}", first.nonce);
                    let server_first = std::str::from_utf8(challenge).expect("parsed as UTF-8");
                    let auth_message = format!("{bare},{server_first},{without_proof}");
                    let signature = self.hash.mac(&stored_key, auth_message.as_bytes());
                    let proof = xor(&client_key, &signature);
                    self.step = Step::SentFinal {
                        server_signature: self.hash.mac(&server_key, auth_message.as_bytes()),
                    };
                    Ok(Some(
                        format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
                    ))
                }
                Step::SentFinal { server_signature } => {
                    let signature = parse_server_final(challenge)?;
                    if !same(&signature, &server_signature) {
                        return Err(
                            "the server's signature is wrong: it does not know the password".to_owned()
                        );
                    }
                    Ok(None)
                }
                Step::Start | Step::Done => Err("a SCRAM challenge out of turn".to_owned()),
            }
        }
    }
}

/// Base64 of `bytes`, as SCRAM and the credential files write them.
pub fn base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::scram::*;
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, with its nonces.
    #[test]
    fn rfc7677_example() {
        let mut client = Client::new(Hash::Sha256, "user", "pencil".to_owned());
        // The RFC's client nonce.
        let nonce = "rOprNGfwEbeRWgbNEkqO";
        let first = client.first_for_test(nonce);
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = client.answer(server_first).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(last).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            client
                .answer(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            None
        );
    }

    #[test]
    fn a_server_that_does_not_know_the_password_is_refused() {
        let mut client = Client::new(Hash::Sha256, "user", "pencil".to_owned());
        client.first_for_test("abc");
        client.answer(b"r=abcdef,s=c2FsdA==,i=4096").unwrap().unwrap();
        let err = client.answer(b"v=AAAA").unwrap_err();
        assert!(err.contains("does not know the password"), "{err}");
    }

    #[test]
    fn bad_server_first_messages_are_refused() {
        for (message, expect) in [
            (&b"r=other,s=c2FsdA==,i=4096"[..], "does not extend"),
            (b"r=abc,s=c2FsdA==,i=4096", "does not extend"),
            (b"r=abcd,s=c2FsdA==,i=10", "iterations"),
            (b"r=abcd,s=c2FsdA==,i=99999999", "iterations"),
            (b"r=abcd,s=!!,i=4096", "not base64"),
            (b"m=ext,r=abcd", "extension"),
            (b"garbage", "not a SCRAM attribute"),
            (b"\xff", "not UTF-8"),
        ] {
            let mut client = Client::new(Hash::Sha512, "user", "pencil".to_owned());
            client.first_for_test("abc");
            let err = client.answer(message).unwrap_err();
            assert!(err.contains(expect), "{message:?}: {err}");
        }
    }

    #[test]
    fn client_messages_parse_back() {
        let first = parse_client_first(b"n,,n=a=3Db=2Cc,r=xyz,tokenauth=true").unwrap();
        assert_eq!(first.username, "a=b,c");
        assert_eq!(first.nonce, "xyz");
        assert!(first.token_auth);
        assert!(parse_client_first(b"y,,n=a,r=x").is_err());
        assert!(parse_client_first(b"n,a=b,n=a,r=x").is_err());
        assert!(parse_client_first(b"n,,n=a=4,r=x").is_err());
        let last = parse_client_final(b"c=biws,r=xyz,p=AAAA").unwrap();
        assert_eq!(last.without_proof, "c=biws,r=xyz");
        assert_eq!(last.proof, vec![0, 0, 0]);
        assert!(parse_client_final(b"c=biws,r=xyz").is_err());
    }

    #[test]
    fn plain_and_oauthbearer_messages() {
        let mut plain = ClientMechanism::new(SaslMechanism::Plain, "alice", "secret".to_owned());
        assert_eq!(plain.first(), b"\0alice\0secret");
        assert_eq!(plain.answer(b"").unwrap(), None);
        let mut oauth = ClientMechanism::new(SaslMechanism::OAuthBearer, "", "tok".to_owned());
        assert_eq!(oauth.first(), b"n,,\x01auth=Bearer tok\x01\x01");
        assert_eq!(
            oauth.answer(b"{\"status\":\"invalid_token\"}").unwrap(),
            Some(vec![1])
        );
        assert_eq!(oauth.refusal(), Some("{\"status\":\"invalid_token\"}"));
    }
}
