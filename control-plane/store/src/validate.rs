//! Checks every backend runs before a request leaves the caller, so bad input gets the same error
//! everywhere and nothing of it is written.

use crate::error::{Result, StoreError};
use crate::types::{
    Compare, MAX_KEY_BYTES, MAX_LEASE_TTL_SECS, MAX_PREFIX_BYTES, MAX_REQUEST_BYTES, MAX_TXN_OPS,
    RangeRequest, Txn, TxnOp,
};

/// What a request costs beyond its keys and values: etcd's request header (ids, user name, auth
/// revision) and message framing.
const REQUEST_OVERHEAD: usize = 1024;
/// What each compare or op costs beyond its key and value: its framing and fields (etcd's protobuf
/// encoding needs under 40 bytes) and room for the etcd backend's key prefix.
const OP_OVERHEAD: usize = 64 + MAX_PREFIX_BYTES;

/// A key is a non-empty absolute path of printable characters, at most [`MAX_KEY_BYTES`] long.
pub fn key(key: &str) -> Result<()> {
    let invalid = |reason| Err(StoreError::InvalidKey { key: key.to_owned(), reason });
    if key.is_empty() {
        return invalid("empty");
    }
    if !key.starts_with('/') {
        return invalid("does not start with '/'");
    }
    if key.len() > MAX_KEY_BYTES {
        return invalid("longer than 4096 bytes");
    }
    if key.chars().any(char::is_control) {
        return invalid("contains a control character");
    }
    Ok(())
}

/// A range's prefix and continuation key are keys, and the continuation lies under the prefix.
pub fn range(request: &RangeRequest) -> Result<()> {
    key(&request.prefix)?;
    // A continuation need not be a key: Kubernetes continues from `last_key + "\0"`.
    if let Some(from) = &request.from
        && (!from.starts_with(&request.prefix) || request.exact || from.len() > MAX_KEY_BYTES + 1)
    {
        return Err(StoreError::InvalidRequest(format!(
            "continuation key {from:?} is not under the range {:?}",
            request.prefix
        )));
    }
    if request.revision.is_some_and(|r| r < 0) {
        return Err(StoreError::InvalidRequest(format!("negative revision {:?}", request.revision)));
    }
    if request.limit == Some(0) {
        return Err(StoreError::InvalidRequest("limit 0: ask for no limit instead".into()));
    }
    Ok(())
}

/// The largest value a transaction putting only `key` may carry.
pub fn max_value_bytes(key: &str) -> usize {
    MAX_REQUEST_BYTES.saturating_sub(REQUEST_OVERHEAD + OP_OVERHEAD + key.len())
}

/// The size a transaction is measured at against [`MAX_REQUEST_BYTES`].
pub fn txn_bytes(txn: &Txn) -> usize {
    let ops = txn.success.iter().chain(&txn.failure);
    let values: usize =
        ops.clone().map(|op| if let TxnOp::Put { value, .. } = op { value.len() } else { 0 }).sum();
    let keys: usize =
        txn.compares.iter().map(Compare::key).chain(ops.map(TxnOp::key)).map(|k| k.len() + OP_OVERHEAD).sum();
    REQUEST_OVERHEAD + keys + values
}

/// A lease TTL in whole seconds as both backends grant it: rounded up, at least 1, at most etcd's
/// maximum ([`MAX_LEASE_TTL_SECS`], "too large lease TTL").
pub fn lease_ttl(ttl: std::time::Duration) -> Result<i64> {
    let secs = ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)).max(1);
    match i64::try_from(secs) {
        Ok(secs) if secs <= MAX_LEASE_TTL_SECS => Ok(secs),
        _ => Err(StoreError::InvalidRequest(format!(
            "too large lease TTL {ttl:?}: at most {MAX_LEASE_TTL_SECS} seconds"
        ))),
    }
}

/// Every key valid, at most [`MAX_TXN_OPS`] operations per branch, no key written twice in one
/// branch (etcd's "duplicate key given in txn request"), and the whole request within
/// [`MAX_REQUEST_BYTES`], measured with room for etcd's framing and key prefix.
pub fn txn(txn: &Txn) -> Result<()> {
    if txn.compares.len() > MAX_TXN_OPS {
        return Err(StoreError::InvalidRequest(format!(
            "{} compares in one transaction, more than the limit of {MAX_TXN_OPS}",
            txn.compares.len()
        )));
    }
    for compare in &txn.compares {
        key(compare.key())?;
    }
    for branch in [&txn.success, &txn.failure] {
        if branch.len() > MAX_TXN_OPS {
            return Err(StoreError::InvalidRequest(format!(
                "{} operations in one transaction branch, more than the limit of {MAX_TXN_OPS}",
                branch.len()
            )));
        }
        let mut written: Vec<&str> = Vec::new();
        for op in branch {
            key(op.key())?;
            if !matches!(op, TxnOp::Get { .. }) {
                if written.contains(&op.key()) {
                    return Err(StoreError::InvalidRequest(format!(
                        "duplicate key {:?} given in one transaction branch",
                        op.key()
                    )));
                }
                written.push(op.key());
            }
        }
    }
    let size = txn_bytes(txn);
    if size > MAX_REQUEST_BYTES {
        return Err(StoreError::RequestTooLarge { size, limit: MAX_REQUEST_BYTES });
    }
    Ok(())
}

/// The first key after every key starting with `prefix` (etcd's `GetPrefixRangeEnd`), as bytes: the
/// prefix with its last byte below 0xff raised by one.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: every key from the prefix on ("\0" means "to the end" in etcd).
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(key("/registry/pods/default/nginx").is_ok());
        for bad in ["", "registry/pods", "/a\0b", "/a\nb"] {
            assert!(matches!(key(bad), Err(StoreError::InvalidKey { .. })), "{bad:?} accepted");
        }
        assert!(key(&format!("/{}", "a".repeat(MAX_KEY_BYTES))).is_err());
    }

    #[test]
    fn txn_limits() {
        let big = Txn::new().and_then([TxnOp::put("/k", vec![0; MAX_REQUEST_BYTES])]);
        assert!(matches!(txn(&big), Err(StoreError::RequestTooLarge { .. })));
        let largest = Txn::new().and_then([TxnOp::put("/k", vec![0; max_value_bytes("/k")])]);
        assert!(txn(&largest).is_ok());
        let over = Txn::new().and_then([TxnOp::put("/k", vec![0; max_value_bytes("/k") + 1])]);
        assert!(txn(&over).is_err());
        let dup = Txn::new().and_then([TxnOp::put("/k", "a"), TxnOp::delete("/k")]);
        assert!(matches!(txn(&dup), Err(StoreError::InvalidRequest(_))));
        let read_twice = Txn::new().and_then([TxnOp::get("/k"), TxnOp::put("/k", "a")]);
        assert!(txn(&read_twice).is_ok());
        let many = Txn::new().and_then((0..=MAX_TXN_OPS).map(|i| TxnOp::put(format!("/k{i}"), "v")));
        assert!(txn(&many).is_err());
        let compares = Txn::new().when((0..=MAX_TXN_OPS).map(|i| Compare::Exists(format!("/k{i}"))));
        assert!(txn(&compares).is_err());
        assert_eq!(max_value_bytes(&"k".repeat(2 * MAX_REQUEST_BYTES)), 0);
    }

    #[test]
    fn lease_ttls() {
        use std::time::Duration;
        assert_eq!(lease_ttl(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(lease_ttl(Duration::from_millis(1500)).unwrap(), 2);
        assert_eq!(lease_ttl(Duration::ZERO).unwrap(), 1);
        assert_eq!(lease_ttl(Duration::from_secs(MAX_LEASE_TTL_SECS as u64)).unwrap(), MAX_LEASE_TTL_SECS);
        assert!(lease_ttl(Duration::from_secs(MAX_LEASE_TTL_SECS as u64 + 1)).is_err());
        assert!(lease_ttl(Duration::MAX).is_err());
    }

    #[test]
    fn continuation_under_prefix() {
        assert!(range(&RangeRequest::prefix("/a/").from("/a/x")).is_ok());
        assert!(range(&RangeRequest::prefix("/a/").from("/a/x\0")).is_ok());
        assert!(range(&RangeRequest::prefix("/a/").from("/b/x")).is_err());
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"/a\xff"), b"/b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }
}
