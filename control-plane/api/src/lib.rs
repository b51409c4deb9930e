//! keel-api: the Kubernetes API machinery Keel's apiserver is made of, with no IO — which resources
//! exist and how they are named ([`resources`]), errors as Kubernetes `Status` objects ([`status`]),
//! label and field selectors ([`labels`], [`fields`]), the discovery documents ([`discovery`]) and
//! the OpenAPI documents ([`openapi`]); CustomResourceDefinitions ([`crd`]) and the custom resources
//! they serve ([`custom`]).
//! Kubernetes 1.34 (k8s-openapi's `v1_34`).

pub mod certificates;
pub mod convert;
pub mod crd;
pub mod custom;
pub mod defaults;
pub mod discovery;

/// metav1.Duration's text form, Go's `time.Duration` (`1m30s`), as the API's JSON and the
/// components' configuration files write it.
pub mod duration {
    pub use crate::protobuf::forms::{format_duration as format, parse_duration as parse};
}

pub mod fields;
pub mod labels;
pub mod managed_fields;
pub mod openapi;
pub mod protobuf;
pub mod resources;
pub mod status;
pub mod strategic;
pub mod strategy;
pub mod table;
pub mod typed;
pub mod validation;
