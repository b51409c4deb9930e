//! Image references parsed and normalized as containerd and docker do (distribution's reference
//! grammar): `busybox` is `docker.io/library/busybox:latest`, a first component with a `.` or a `:`
//! (or `localhost`) is a registry host (with an optional port), `@sha256:<hex>` pins a digest.

use std::fmt;

use super::Code;

/// The registry of names without a host.
pub const DEFAULT_REGISTRY: &str = "docker.io";
/// The tag of names with neither a tag nor a digest.
pub const DEFAULT_TAG: &str = "latest";
/// The longest repository name (host and path) the grammar accepts.
const NAME_MAX: usize = 255;

/// A malformed image reference: the CRI server answers InvalidArgument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    /// The reference as given.
    pub reference: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl ReferenceError {
    /// The gRPC code of this error (always InvalidArgument).
    #[must_use]
    pub fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

/// A normalized image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The registry host, with its port if any (`docker.io`, `localhost:5000`).
    pub registry: String,
    /// The repository path (`library/busybox`).
    pub repository: String,
    /// The tag; `latest` when neither a tag nor a digest was given.
    pub tag: Option<String>,
    /// The digest (`sha256:<64 hex>`), when pinned.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses and normalizes `input`.
    ///
    /// # Errors
    /// [`ReferenceError`] when `input` is not a valid reference.
    pub fn parse(input: &str) -> Result<Self, ReferenceError> {
        let err = |reason| ReferenceError { reference: input.to_owned(), reason };
        if input.is_empty() {
            return Err(err("empty reference"));
        }
        let (name_tag, digest) = match input.split_once('@') {
            Some((n, d)) => {
                validate_digest(d).map_err(err)?;
                (n, Some(d.to_owned()))
            }
            None => (input, None),
        };
        // A tag is the part after the last ':' that follows the last '/'.
        let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_tag[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&name_tag[..at], Some(name_tag[at + 1..].to_owned()))
            }
            None => (name_tag, None),
        };
        if let Some(t) = &tag {
            validate_tag(t).map_err(err)?;
        }
        if name.is_empty() {
            return Err(err("empty repository name"));
        }
        if name.len() > NAME_MAX {
            return Err(err("repository name longer than 255 characters"));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.chars().any(|c| c.is_ascii_uppercase()) =>
            {
                validate_host(first).map_err(err)?;
                (first.to_owned(), rest.to_owned())
            }
            _ => (DEFAULT_REGISTRY.to_owned(), name.to_owned()),
        };
        let registry = if registry == "index.docker.io" { DEFAULT_REGISTRY.to_owned() } else { registry };
        let repository = if registry == DEFAULT_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        for component in repository.split('/') {
            validate_component(component).map_err(err)?;
        }
        let tag = match (tag, &digest) {
            (None, None) => Some(DEFAULT_TAG.to_owned()),
            (t, _) => t,
        };
        Ok(Self { registry, repository, tag, digest })
    }

    /// The repository's full name: `docker.io/library/busybox`.
    #[must_use]
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn validate_digest(d: &str) -> Result<(), &'static str> {
    let (alg, hex) = d.split_once(':').ok_or("digest without an algorithm")?;
    let len = match alg {
        "sha256" => 64,
        "sha512" => 128,
        _ => return Err("unsupported digest algorithm"),
    };
    if hex.len() != len || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("malformed digest");
    }
    Ok(())
}

/// `[\w][\w.-]{0,127}`.
fn validate_tag(t: &str) -> Result<(), &'static str> {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    match t.as_bytes() {
        [first, rest @ ..]
            if ok(*first) && rest.len() <= 127 && rest.iter().all(|&b| ok(b) || b == b'.' || b == b'-') =>
        {
            Ok(())
        }
        _ => Err("malformed tag"),
    }
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`.
fn validate_component(c: &str) -> Result<(), &'static str> {
    const BAD: &str = "malformed repository path component";
    let bytes = c.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Err(BAD);
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-')) {
            return Err(BAD);
        }
    }
    Ok(())
}

/// A host name (labels of `[a-zA-Z0-9-]`, not starting or ending with `-`) or a bracketed IPv6
/// address, with an optional numeric port.
fn validate_host(h: &str) -> Result<(), &'static str> {
    const BAD: &str = "malformed registry host";
    let (host, port) = if let Some(rest) = h.strip_prefix('[') {
        let (addr, after) = rest.split_once(']').ok_or(BAD)?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(BAD);
        }
        (None, if after.is_empty() { None } else { Some(after.strip_prefix(':').ok_or(BAD)?) })
    } else {
        match h.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(h), None),
        }
    };
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(BAD);
    }
    if let Some(host) = host {
        let label_ok = |l: &str| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !host.split('.').all(label_ok) {
            return Err(BAD);
        }
    }
    Ok(())
}
