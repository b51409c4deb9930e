//! nftables over plain netlink, used synchronously: netlink-packet-netfilter builds and parses the
//! messages, netlink-sys gives the socket. [`netlink`] is the connection (atomic batches with every
//! refusal reported, rule dumps, chain lookups); [`expr`] the expressions Keel's rules are made of,
//! typed where netlink-packet-netfilter 0.4 lacks them (nat, masq, fib, numgen, ct, lookup, dynset,
//! reject). Shared by keel-cni (its own table `inet keel-cni`) and keel-proxy (`ip`/`ip6 keel-proxy`).

pub mod expr;
pub mod netlink;
