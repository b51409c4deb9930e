//! networking.k8s.io/v1 ServiceCIDRs (status) and IPAddresses, which kube-proxy 1.34's informers
//! and the multi-CIDR allocator use — the default ServiceCIDR made at start, validation,
//! subresources, upstream's tables and discovery, with kubectl 1.33 and plain requests.

use crate::common;

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use common::{Admin, Server, causes};
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use serde_json::{Value, json};

struct Cluster {
    server: Server,
    store: Arc<dyn Store>,
    admin: Admin,
}

impl Cluster {
    /// A server whose `--service-cluster-ip-range` is 10.96.0.0/16.
    async fn start() -> Result<Cluster> {
        let dir = tempfile::tempdir()?;
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?);
        let server =
            Server::start_with(store.clone(), dir, |config| config.services = range("10.96.0.0/16")).await?;
        let admin = Admin::of(&server)?;
        Ok(Cluster { server, store, admin })
    }

    /// A JSON request as the admin (a PATCH is a merge patch): status and body.
    async fn request(&self, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
        self.server.json_request(method, path, body).await
    }
}

fn range(cidr: &str) -> keel_apiserver::services::ServiceRanges {
    keel_apiserver::services::ServiceRanges::parse(cidr, "30000-32767").unwrap_or_default()
}

/// The rows kubectl prints, each split on runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|line| line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect())
        .collect()
}

const CIDRS: &str = "/apis/networking.k8s.io/v1/servicecidrs";

/// As kube-apiserver's default ServiceCIDR controller: `kubernetes` from the flag, Ready, its
/// condition applied by `kubernetes-service-cidr-controller`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_service_cidr_is_made_ready_at_start() -> Result<()> {
    let c = Cluster::start().await?;
    let table = rows(&c.admin.ok(&["get", "servicecidr"]).await?);
    ensure!(
        table[0] == ["NAME", "CIDRS", "AGE"] && table[1][..2] == ["kubernetes", "10.96.0.0/16"],
        "{table:?}"
    );
    let cidr = c.admin.json(&["get", "servicecidr", "kubernetes"]).await?;
    let conditions = cidr["status"]["conditions"].as_array().cloned().unwrap_or_default();
    ensure!(conditions.len() == 1, "{cidr}");
    let ready = &conditions[0];
    ensure!(
        ready["type"] == "Ready"
            && ready["status"] == "True"
            && ready["message"] == "Kubernetes default Service CIDR is ready"
            && ready["lastTransitionTime"].is_string()
            && cidr["metadata"].get("generation").is_none(),
        "{cidr}"
    );
    let (_, served) = c.request("GET", &format!("{CIDRS}/kubernetes"), &Value::Null).await?;
    let managers: Vec<(&str, &str, &str)> = served["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default(),
                m["operation"].as_str().unwrap_or_default(),
                m["subresource"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    ensure!(
        managers
            == [("kubernetes-service-cidr-controller", "Apply", "status"), ("kube-apiserver", "Update", "")],
        "{managers:?}"
    );
    // The field selector the controller's informer and kube-proxy use.
    let (status, list) =
        c.request("GET", &format!("{CIDRS}?fieldSelector=metadata.name%3Dkubernetes"), &Value::Null).await?;
    ensure!(status == 200 && list["items"].as_array().map(Vec::len) == Some(1), "{list}");

    // Another start on the same store finds it Ready and writes nothing; one with another range
    // reports the mismatch and leaves it alone, as upstream's controller does.
    let revision = cidr["metadata"]["resourceVersion"].clone();
    for flag in ["10.96.0.0/16", "10.200.0.0/16"] {
        let mut config = keel_apiserver::Config::new("127.0.0.1:0".parse()?);
        config.services = range(flag);
        keel_apiserver::ApiServer::new(c.store.clone(), config).await?;
        let (_, after) = c.request("GET", &format!("{CIDRS}/kubernetes"), &Value::Null).await?;
        ensure!(
            after["metadata"]["resourceVersion"] == revision
                && after["spec"]["cidrs"] == json!(["10.96.0.0/16"]),
            "{flag}: {after}"
        );
    }
    // Deleted, it is made again at the next start (upstream's controller makes it within 10 s).
    c.admin.ok(&["delete", "servicecidr", "kubernetes"]).await?;
    let mut config = keel_apiserver::Config::new("127.0.0.1:0".parse()?);
    config.services = range("10.96.0.0/16");
    keel_apiserver::ApiServer::new(c.store.clone(), config).await?;
    let again = c.admin.json(&["get", "servicecidr", "kubernetes"]).await?;
    ensure!(again["status"]["conditions"][0]["status"] == "True", "{again}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_cidrs_validation_status_and_immutability() -> Result<()> {
    let c = Cluster::start().await?;
    let cidr = |name: &str, cidrs: &[&str]| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": name},
               "spec": {"cidrs": cidrs}})
    };
    let created = c.admin.create(&cidr("extra", &["10.100.0.0/16"])).await?;
    ensure!(created.get("status").is_none() && created["metadata"].get("generation").is_none(), "{created}");

    for (object, wanted) in [
        (cidr("empty", &[]), vec!["spec.cidrs: Required value: at least one CIDR required"]),
        (
            cidr("two-v4", &["10.1.0.0/16", "10.2.0.0/16"]),
            vec![
                "spec.cidrs: Invalid value: [\"10.1.0.0/16\",\"10.2.0.0/16\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ],
        ),
        (
            cidr("bits", &["10.1.0.1/16"]),
            vec![
                "spec.cidrs[0]: Invalid value: \"10.1.0.1/16\": must not have bits set beyond the prefix length",
            ],
        ),
    ] {
        let (status, answer) = c.request("POST", CIDRS, &object).await?;
        let causes = causes(&answer);
        ensure!(status == 422 && answer["reason"] == "Invalid" && causes == wanted, "{status} {answer}");
    }
    // The CIDRs are immutable, but a single-stack ServiceCIDR may become dual-stack.
    let path = format!("{CIDRS}/extra");
    let (status, answer) = c.request("PATCH", &path, &json!({"spec": {"cidrs": ["10.101.0.0/16"]}})).await?;
    ensure!(
        status == 422
            && causes(&answer) == ["spec.cidrs[0]: Invalid value: \"10.101.0.0/16\": field is immutable"],
        "{status} {answer}"
    );
    let refused = c
        .admin
        .refused(&[
            "patch",
            "servicecidr",
            "extra",
            "--type=merge",
            "-p",
            r#"{"spec":{"cidrs":["10.100.0.0/16","fd00::/64","fd01::/64"]}}"#,
        ])
        .await?;
    ensure!(
        refused.contains("spec.cidrs: Invalid value") && refused.contains("field is immutable"),
        "{refused}"
    );
    let (status, answer) =
        c.request("PATCH", &path, &json!({"spec": {"cidrs": ["10.100.0.0/16", "fd00:100::/108"]}})).await?;
    ensure!(status == 200 && answer["spec"]["cidrs"][1] == "fd00:100::/108", "{status} {answer}");
    let table = rows(&c.admin.ok(&["get", "servicecidr", "extra", "--no-headers"]).await?);
    ensure!(table[0][..2] == ["extra", "10.100.0.0/16,fd00:100::/108"], "{table:?}");

    // Through /status only the status changes.
    c.admin.ok(&["patch", "servicecidr", "extra", "--subresource=status", "--type=merge", "-p",
           r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"","message":"ok","lastTransitionTime":"2025-06-01T12:00:00Z"}]},"spec":{"cidrs":["10.9.0.0/16"]}}"#])
        .await?;
    let extra = c.admin.json(&["get", "servicecidr", "extra"]).await?;
    ensure!(
        extra["status"]["conditions"][0]["message"] == "ok" && extra["spec"]["cidrs"][0] == "10.100.0.0/16",
        "{extra}"
    );
    // upstream's strategy keeps nothing on a main-resource update: a status sent there is written.
    let (status, answer) = c.request("PATCH", &path, &json!({"status": {"conditions": null}})).await?;
    ensure!(status == 200 && answer.get("status").is_none_or(|s| s.get("conditions").is_none()), "{answer}");
    c.admin.ok(&["delete", "servicecidr", "extra"]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_addresses_names_parents_and_tables() -> Result<()> {
    let c = Cluster::start().await?;
    let ip = |name: &str, parent: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress", "metadata": {"name": name},
               "spec": {"parentRef": parent}})
    };
    let dns = json!({"group": "", "resource": "services", "namespace": "kube-system", "name": "kube-dns"});
    c.admin.create(&ip("10.96.0.10", dns.clone())).await?;
    c.admin
        .create(&ip(
            "fd00:10:96::a",
            json!({"group": "gateway.networking.k8s.io", "resource": "gateways", "name": "gw"}),
        ))
        .await?;
    let table = rows(&c.admin.ok(&["get", "ip"]).await?);
    ensure!(
        table
            == [
                vec!["NAME", "PARENTREF"],
                vec!["10.96.0.10", "services/kube-system/kube-dns"],
                vec!["fd00:10:96::a", "gateways.gateway.networking.k8s.io/gw"],
            ],
        "{table:?}"
    );
    // The Table as upstream serves it: two columns, and an age cell besides.
    let headers = [("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")];
    let (status, _, body) =
        c.server.request("GET", "/apis/networking.k8s.io/v1/ipaddresses", &headers, b"").await?;
    let table: Value = serde_json::from_str(&body)?;
    ensure!(
        status == 200
            && table["columnDefinitions"].as_array().map(Vec::len) == Some(2)
            && table["rows"][0]["cells"].as_array().map(Vec::len) == Some(3),
        "{table}"
    );

    let path = "/apis/networking.k8s.io/v1/ipaddresses";
    for (name, message) in [
        ("10.96.0.010", "must not have leading 0s"),
        ("fd00:10:96:0::b", "must be in canonical form (\"fd00:10:96::b\")"),
        ("kube-dns", "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"),
    ] {
        let (status, answer) = c.request("POST", path, &ip(name, dns.clone())).await?;
        ensure!(
            status == 422
                && causes(&answer) == [format!("metadata.name: Invalid value: \"{name}\": {message}")],
            "{name}: {status} {answer}"
        );
    }
    let (status, answer) = c
        .request(
            "POST",
            path,
            &json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
                                      "metadata": {"name": "10.96.0.11"}, "spec": {}}),
        )
        .await?;
    ensure!(status == 422 && causes(&answer) == ["spec.parentRef: Required value"], "{answer}");
    // generateName is the name itself (upstream's no-op name generator).
    let (status, answer) = c
        .request("POST", path, &json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
                                      "metadata": {"generateName": "10.96.0.12"}, "spec": {"parentRef": dns}}))
        .await?;
    ensure!(status == 201 && answer["metadata"]["name"] == "10.96.0.12", "{status} {answer}");
    // The parent is immutable; labels are not.
    let (status, answer) = c
        .request("PATCH", &format!("{path}/10.96.0.10"), &json!({"spec": {"parentRef": {"name": "other"}}}))
        .await?;
    ensure!(
        status == 422
            && causes(&answer)
                == [
                    "spec.parentRef: Invalid value: {\"Group\":\"\",\"Name\":\"other\",\"Namespace\":\"kube-system\",\"Resource\":\"services\"}: field is immutable"
                ],
        "{status} {answer}"
    );
    c.admin.ok(&["label", "ip", "10.96.0.10", "a=b"]).await?;
    Ok(())
}

/// kubectl api-resources and both discovery forms list networking.k8s.io as kube-apiserver does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_of_networking() -> Result<()> {
    let c = Cluster::start().await?;
    let listed: Vec<Vec<String>> =
        rows(&c.admin.ok(&["api-resources", "--api-group=networking.k8s.io"]).await?)
            .into_iter()
            .skip(1)
            .collect();
    ensure!(
        listed
            == [
                vec!["ipaddresses", "ip", "networking.k8s.io/v1", "false", "IPAddress"],
                vec!["servicecidrs", "networking.k8s.io/v1", "false", "ServiceCIDR"],
            ],
        "{listed:?}"
    );
    let (status, groups) = c.request("GET", "/apis", &Value::Null).await?;
    let names: Vec<&str> =
        groups["groups"].as_array().into_iter().flatten().filter_map(|g| g["name"].as_str()).collect();
    let at = names.iter().position(|g| *g == "networking.k8s.io").context("networking.k8s.io listed")?;
    ensure!(
        status == 200 && names[at - 1] == "certificates.k8s.io" && names[at + 1] == "policy",
        "{names:?}"
    );
    let (status, list) = c.request("GET", "/apis/networking.k8s.io/v1", &Value::Null).await?;
    let resources: Vec<&str> =
        list["resources"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    ensure!(status == 200 && resources == ["ipaddresses", "servicecidrs", "servicecidrs/status"], "{list}");
    let explained = c.admin.ok(&["explain", "servicecidr.spec.cidrs"]).await?;
    ensure!(explained.contains("CIDRs defines the IP blocks"), "{explained}");
    let explained = c.admin.ok(&["explain", "ipaddress.spec.parentRef"]).await?;
    ensure!(explained.contains("resource"), "{explained}");
    Ok(())
}
