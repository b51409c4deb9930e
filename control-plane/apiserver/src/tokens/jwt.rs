//! JSON Web Tokens as kube-apiserver writes and reads them (go-jose v2): compact JWS, a protected
//! header of `alg` and `kid` only, the claims one JSON object with its keys sorted (go-jose merges
//! the public and private claims through a map), NumericDates as whole seconds, and a leeway of
//! one minute on `nbf`, `exp` and `iat` (go-jose's DefaultLeeway).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use super::keys::{Algorithm, KeyError, PublicKey, SigningKey};

/// go-jose's DefaultLeeway, in seconds.
pub const LEEWAY_SECONDS: i64 = 60;

/// A compact JWS taken apart, its signature not yet checked.
#[derive(Debug)]
pub struct Jws<'a> {
    /// `None` for an algorithm Keel does not verify (`none` among them): no key verifies it.
    pub algorithm: Option<Algorithm>,
    pub kid: String,
    pub payload: Vec<u8>,
    signing_input: &'a str,
    signature: Vec<u8>,
}

/// Why a token is not a JWS Keel can read.
pub const MALFORMED: &str = "the token is not a compact JWS";

impl<'a> Jws<'a> {
    /// Reads `header.payload.signature` (base64url without padding, as Go's RawURLEncoding).
    pub fn parse(token: &'a str) -> Result<Jws<'a>, &'static str> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(MALFORMED);
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| MALFORMED);
        #[derive(Deserialize)]
        struct Header {
            #[serde(default)]
            alg: String,
            #[serde(default)]
            kid: String,
        }
        let header: Header = serde_json::from_slice(&decode(header)?).map_err(|_| MALFORMED)?;
        let algorithm = match header.alg.as_str() {
            "RS256" => Some(Algorithm::Rs256),
            "ES256" => Some(Algorithm::Es256),
            "ES384" => Some(Algorithm::Es384),
            _ => None,
        };
        let signing_input = &token[..header_len(token, payload)];
        Ok(Jws {
            algorithm,
            kid: header.kid,
            payload: decode(payload)?,
            signing_input,
            signature: decode(signature)?,
        })
    }

    /// Whether one of `keys` signed it: those of its `kid` when it names one (none of them: no
    /// key), every key otherwise — upstream's static key getter.
    pub fn verify(&self, keys: &[PublicKey]) -> Result<(), &'static str> {
        let candidates: Vec<&PublicKey> =
            keys.iter().filter(|k| self.kid.is_empty() || k.kid == self.kid).collect();
        if candidates.is_empty() {
            return Err("invalid signature, no keys found");
        }
        let Some(algorithm) = self.algorithm else {
            return Err("square/go-jose: error in cryptographic primitive");
        };
        let message = self.signing_input.as_bytes();
        if candidates.iter().any(|key| key.verify(algorithm, message, &self.signature)) {
            Ok(())
        } else {
            Err("square/go-jose: error in cryptographic primitive")
        }
    }
}

/// The length of `header.payload` within `token`, `payload` being its second part.
fn header_len(token: &str, payload: &str) -> usize {
    // `payload` is a slice of `token` right after the first dot.
    let start = token.find('.').map_or(0, |dot| dot + 1);
    start + payload.len()
}

/// A signed compact JWS of `claims` (`{"alg","kid"}` header, as go-jose writes it).
pub fn sign(key: &SigningKey, claims: &Value) -> Result<String, KeyError> {
    let public = key.public();
    let header = json!({"alg": public.algorithm.name(), "kid": public.kid});
    let encode = |value: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default());
    let mut token = format!("{}.{}", encode(&header), encode(claims));
    let signature = key.sign(token.as_bytes())?;
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(signature));
    Ok(token)
}

/// A `{name, uid}` reference in the `kubernetes.io` claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ObjectRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
}

/// The `kubernetes.io` private claim of a bound token.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Kubernetes {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub serviceaccount: ObjectRef,
    pub pod: Option<ObjectRef>,
    pub secret: Option<ObjectRef>,
    pub node: Option<ObjectRef>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub warnafter: Option<i64>,
}

/// Every claim Keel reads: the registered ones, a bound token's `kubernetes.io`, and a legacy
/// (Secret) token's `kubernetes.io/serviceaccount/*`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Claims {
    #[serde(default)]
    pub iss: String,
    #[serde(default)]
    pub sub: String,
    #[serde(default, deserialize_with = "audience")]
    pub aud: Vec<String>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub exp: Option<i64>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub nbf: Option<i64>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub iat: Option<i64>,
    #[serde(default)]
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: Option<Kubernetes>,
    #[serde(rename = "kubernetes.io/serviceaccount/namespace", default)]
    pub legacy_namespace: String,
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name", default)]
    pub legacy_secret_name: String,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name", default)]
    pub legacy_service_account_name: String,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid", default)]
    pub legacy_service_account_uid: String,
}

impl Claims {
    pub fn parse(payload: &[u8]) -> Result<Claims, &'static str> {
        serde_json::from_slice(payload).map_err(|_| "square/go-jose/jwt: illegal JSON claims")
    }

    /// go-jose's Validate with its default leeway, in upstream's words.
    pub fn validate_times(&self, now: i64) -> Result<(), &'static str> {
        if self.nbf.is_some_and(|nbf| now + LEEWAY_SECONDS < nbf) {
            return Err("service account token is not valid yet");
        }
        if self.exp.is_some_and(|exp| now - LEEWAY_SECONDS > exp) {
            return Err("service account token has expired");
        }
        if self.iat.is_some_and(|iat| now + LEEWAY_SECONDS < iat) {
            return Err("service account token is issued in the future");
        }
        Ok(())
    }
}

/// A NumericDate: a JSON number of seconds (go-jose reads a float and truncates it).
fn numeric_date<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.map(|seconds| seconds as i64))
}

/// `aud`: one string or an array of them.
fn audience<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Audience {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<Audience>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(Audience::One(one)) => vec![one],
        Some(Audience::Many(many)) => many,
    })
}

/// A `{name, uid}` object with empty fields left out (upstream's `omitempty`).
pub fn reference(name: &str, uid: &str) -> Value {
    let mut object = Map::new();
    if !name.is_empty() {
        object.insert("name".into(), name.into());
    }
    if !uid.is_empty() {
        object.insert("uid".into(), uid.into());
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_tokens_verify_and_nothing_else_does() {
        let (key, _) = SigningKey::generate().unwrap();
        let (other, _) = SigningKey::generate().unwrap();
        let keys = vec![key.public().clone()];
        let token = sign(&key, &json!({"iss": "x", "aud": "one"})).unwrap();
        let jws = Jws::parse(&token).unwrap();
        assert_eq!(jws.kid, key.public().kid);
        jws.verify(&keys).unwrap();
        assert_eq!(Claims::parse(&jws.payload).unwrap().aud, ["one"]);
        // Signed by another key: its kid names no key here.
        let forged = sign(&other, &json!({"iss": "x"})).unwrap();
        assert_eq!(Jws::parse(&forged).unwrap().verify(&keys), Err("invalid signature, no keys found"));
        // Another key's signature under this key's header.
        let (head, _) = token.rsplit_once('.').unwrap();
        let resigned = format!("{head}.{}", forged.rsplit_once('.').unwrap().1);
        assert!(Jws::parse(&resigned).unwrap().verify(&keys).is_err());
        // The payload changed.
        let parts: Vec<&str> = token.split('.').collect();
        let changed = format!("{}.{}.{}", parts[0], URL_SAFE_NO_PAD.encode(br#"{"iss":"y"}"#), parts[2]);
        assert!(Jws::parse(&changed).unwrap().verify(&keys).is_err());
        // alg none, with or without a signature.
        let none = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
        for unsigned in [format!("{none}.{}.", parts[1]), format!("{none}.{}.{}", parts[1], parts[2])] {
            let jws = Jws::parse(&unsigned).unwrap();
            assert_eq!(jws.algorithm, None);
            assert!(jws.verify(&keys).is_err());
        }
        for malformed in ["", "a.b", "a.b.c.d", "!.!.!", &format!("{}=.{}.{}", parts[0], parts[1], parts[2])]
        {
            assert!(Jws::parse(malformed).is_err(), "{malformed}");
        }
    }

    #[test]
    fn times_with_a_minute_of_leeway() {
        let claims = Claims { nbf: Some(1000), exp: Some(2000), iat: Some(1000), ..Claims::default() };
        assert!(claims.validate_times(1500).is_ok());
        assert!(claims.validate_times(941).is_ok());
        assert_eq!(claims.validate_times(939), Err("service account token is not valid yet"));
        assert!(claims.validate_times(2060).is_ok());
        assert_eq!(claims.validate_times(2061), Err("service account token has expired"));
        let early = Claims { iat: Some(2000), ..Claims::default() };
        assert_eq!(early.validate_times(1000), Err("service account token is issued in the future"));
        let parsed = Claims::parse(
            br#"{"exp": 1.9e3, "aud": ["a", "b"], "kubernetes.io": {"namespace": "n",
            "serviceaccount": {"name": "s", "uid": "u"}, "warnafter": 5}}"#,
        )
        .unwrap();
        assert_eq!((parsed.exp, parsed.aud.len()), (Some(1900), 2));
        assert_eq!(
            parsed.kubernetes.unwrap().serviceaccount,
            ObjectRef { name: "s".into(), uid: "u".into() }
        );
    }
}
