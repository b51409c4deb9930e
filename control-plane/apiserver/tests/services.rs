//! Services get ClusterIPs and NodePorts from the configured ranges, never one twice (also under
//! concurrent creates), keep them across updates, take and give back what a change of type or node
//! port asks (dry runs only showing it), and give them back when deleted; the `kubernetes` Service
//! names the apiserver.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use anyhow::{Result, ensure};
use common::Server;
use keel_apiserver::services::ServiceRanges;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::{RangeRequest, Store};
use serde_json::{Value, json};

const SERVICES: &str = "/api/v1/namespaces/default/services";
const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

async fn create(server: &Server, service: &Value) -> Result<(u16, Value)> {
    let (status, _, body) = server.request("POST", SERVICES, &JSON, service.to_string().as_bytes()).await?;
    Ok((status, serde_json::from_str(&body)?))
}

fn service(name: &str, spec: Value) -> Value {
    let mut object = json!({"metadata": {"name": name}});
    object["spec"] = spec;
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_ips_and_node_ports() -> Result<()> {
    let server = Server::start().await?;
    let (status, _, kubernetes) = server.request("GET", &format!("{SERVICES}/kubernetes"), &[], b"").await?;
    let kubernetes: Value = serde_json::from_str(&kubernetes)?;
    ensure!(status == 200 && kubernetes["spec"]["clusterIP"] == "10.0.0.1", "{kubernetes}");
    ensure!(kubernetes["spec"]["ports"][0]["targetPort"] == server.address.port(), "{kubernetes}");
    let (_, _, endpoints) =
        server.request("GET", "/api/v1/namespaces/default/endpoints/kubernetes", &[], b"").await?;
    ensure!(endpoints.contains("127.0.0.1"), "{endpoints}");

    // Concurrent creates never share an address.
    let bodies: Vec<String> =
        (0..20).map(|i| service(&format!("s{i}"), json!({"ports": [{"port": 80}]})).to_string()).collect();
    let tasks: Vec<_> =
        bodies.iter().map(|body| server.request("POST", SERVICES, &JSON, body.as_bytes())).collect();
    let mut addresses = HashSet::new();
    for result in futures::future::join_all(tasks).await {
        let (status, _, body) = result?;
        let created: Value = serde_json::from_str(&body)?;
        ensure!(status == 201, "{body}");
        let ip = created["spec"]["clusterIP"].as_str().unwrap_or_default().to_owned();
        ensure!(ip.starts_with("10.0.0.") && ip != "10.0.0.1", "{ip}");
        ensure!(created["spec"]["ports"][0]["targetPort"] == 80 && created["spec"]["type"] == "ClusterIP");
        ensure!(addresses.insert(ip.clone()), "{ip} given twice");
    }

    let (status, np) = create(
        &server,
        &service(
            "np",
            json!({"type": "NodePort", "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443, "nodePort": 30443}]}),
        ),
    )
    .await?;
    ensure!(status == 201, "{np}");
    let first = np["spec"]["ports"][0]["nodePort"].as_i64().unwrap_or_default();
    ensure!((30000..=32767).contains(&first) && np["spec"]["ports"][1]["nodePort"] == 30443, "{np}");
    let (status, taken) = create(
        &server,
        &service("np2", json!({"type": "NodePort", "ports": [{"port": 1, "nodePort": 30443}]})),
    )
    .await?;
    ensure!(
        status == 422
            && taken["message"].as_str().is_some_and(|m| m.contains("provided port is already allocated")),
        "{taken}"
    );

    // A static address: refused while held, given back on delete.
    let held = np["spec"]["clusterIP"].as_str().unwrap_or_default().to_owned();
    let (status, answer) =
        create(&server, &service("again", json!({"clusterIP": held, "ports": [{"port": 80}]}))).await?;
    ensure!(
        status == 422 && answer["message"].as_str().is_some_and(|m| m.contains("already allocated")),
        "{answer}"
    );
    let (status, _, _) = server.request("DELETE", &format!("{SERVICES}/np"), &[], b"").await?;
    ensure!(status == 200);
    let (status, again) =
        create(&server, &service("again", json!({"clusterIP": held, "ports": [{"port": 80}]}))).await?;
    ensure!(status == 201 && again["spec"]["clusterIP"] == held.as_str(), "{again}");
    let (status, reused) = create(
        &server,
        &service("np3", json!({"type": "NodePort", "ports": [{"port": 1, "nodePort": 30443}]})),
    )
    .await?;
    ensure!(status == 201, "{reused}");

    // Updates keep what was allocated and may not change the address.
    let mut update = service("again", json!({"ports": [{"port": 81}]}));
    update["metadata"]["resourceVersion"] = again["metadata"]["resourceVersion"].clone();
    let (status, _, body) =
        server.request("PUT", &format!("{SERVICES}/again"), &JSON, update.to_string().as_bytes()).await?;
    let updated: Value = serde_json::from_str(&body)?;
    ensure!(status == 200 && updated["spec"]["clusterIP"] == held.as_str(), "{body}");
    // Another address than the one held (the held one is random, and could be any).
    let elsewhere = if held == "10.0.0.250" { "10.0.0.251" } else { "10.0.0.250" };
    let moved = json!([{"op": "replace", "path": "/spec/clusterIP", "value": elsewhere}]).to_string();
    let (status, _, body) = server
        .request(
            "PATCH",
            &format!("{SERVICES}/again"),
            &[("Content-Type", "application/json-patch+json")],
            moved.as_bytes(),
        )
        .await?;
    ensure!(status == 422 && body.contains("field is immutable"), "{status} {body} (held {held})");

    // Headless and ExternalName Services hold no address.
    let (status, headless) =
        create(&server, &service("headless", json!({"clusterIP": "None", "ports": [{"port": 80}]}))).await?;
    ensure!(status == 201 && headless["spec"]["clusterIPs"] == json!(["None"]), "{headless}");
    let (status, external) =
        create(&server, &service("ext", json!({"type": "ExternalName", "externalName": "example.com"})))
            .await?;
    ensure!(status == 201 && external["spec"].get("clusterIP").is_none(), "{external}");
    let (status, foreign) =
        create(&server, &service("foreign", json!({"clusterIP": "192.168.1.1", "ports": [{"port": 80}]})))
            .await?;
    ensure!(status == 422, "{foreign}");
    Ok(())
}

/// A server whose store the test also reads, to see the holds themselves.
async fn server_and_store() -> Result<(Server, Arc<dyn Store>)> {
    server_with_node_ports("30000-32767").await
}

async fn server_with_node_ports(node_ports: &str) -> Result<(Server, Arc<dyn Store>)> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?);
    let ranges = ServiceRanges::parse("10.0.0.0/24", node_ports).map_err(anyhow::Error::msg)?;
    let server = Server::start_with(store.clone(), dir, |config| config.services = ranges).await?;
    Ok((server, store))
}

/// Every hold: its key and the uid of the Service holding it.
async fn holds(store: &Arc<dyn Store>) -> Result<BTreeMap<String, String>> {
    let mut holds = BTreeMap::new();
    for prefix in ["/registry/serviceips/", "/registry/servicenodeports/"] {
        for kv in store.range(RangeRequest::prefix(prefix)).await?.kvs {
            holds.insert(kv.key, String::from_utf8_lossy(&kv.value).into_owned());
        }
    }
    Ok(holds)
}

/// The holds of the Service with uid `uid`.
async fn held_by(store: &Arc<dyn Store>, uid: &Value) -> Result<BTreeSet<String>> {
    Ok(holds(store)
        .await?
        .into_iter()
        .filter(|(_, owner)| uid == owner.as_str())
        .map(|(key, _)| key)
        .collect())
}

fn node_port_keys(service: &Value) -> BTreeSet<String> {
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["nodePort"].as_i64())
        .map(|p| format!("/registry/servicenodeports/{p}"))
        .collect()
}

fn ip_key(service: &Value) -> String {
    format!("/registry/serviceips/{}", service["spec"]["clusterIP"].as_str().unwrap_or_default())
}

async fn patch(server: &Server, name: &str, kind: &str, patch: &Value) -> Result<(u16, Value)> {
    let content_type = format!("application/{kind}-patch+json");
    let (status, _, body) = server
        .request(
            "PATCH",
            &format!("{SERVICES}/{name}"),
            &[("Content-Type", content_type.as_str())],
            patch.to_string().as_bytes(),
        )
        .await?;
    Ok((status, serde_json::from_str(&body)?))
}

async fn get(server: &Server, name: &str) -> Result<Value> {
    let (_, _, body) = server.request("GET", &format!("{SERVICES}/{name}"), &[], b"").await?;
    Ok(serde_json::from_str(&body)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn type_and_node_port_updates() -> Result<()> {
    let (server, store) = server_and_store().await?;
    let (status, web) = create(
        &server,
        &service(
            "web",
            json!({"ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]}),
        ),
    )
    .await?;
    ensure!(status == 201, "{web}");
    let uid = web["metadata"]["uid"].clone();
    let address = ip_key(&web);

    // ClusterIP → NodePort: node ports allocated and held, the address kept.
    let (status, web) = patch(&server, "web", "merge", &json!({"spec": {"type": "NodePort"}})).await?;
    ensure!(status == 200 && web["spec"]["externalTrafficPolicy"] == "Cluster", "{web}");
    let ports = node_port_keys(&web);
    ensure!(ports.len() == 2, "{web}");
    let mut expected: BTreeSet<String> = ports.clone();
    expected.insert(address.clone());
    ensure!(held_by(&store, &uid).await? == expected, "{:?}", holds(&store).await?);

    // One node port moved to a free value of the client's choosing: the old one released.
    let old_port = web["spec"]["ports"][0]["nodePort"].as_i64().unwrap_or_default();
    let free = (30000..=32767)
        .find(|p| !ports.contains(&format!("/registry/servicenodeports/{p}")))
        .unwrap_or(30000);
    let mut moved = web.clone();
    moved["spec"]["ports"][0]["nodePort"] = json!(free);
    let (status, _, body) =
        server.request("PUT", &format!("{SERVICES}/web"), &JSON, moved.to_string().as_bytes()).await?;
    let web: Value = serde_json::from_str(&body)?;
    ensure!(status == 200 && web["spec"]["ports"][0]["nodePort"] == free, "{body}");
    let held = held_by(&store, &uid).await?;
    ensure!(
        held.contains(&format!("/registry/servicenodeports/{free}"))
            && !held.contains(&format!("/registry/servicenodeports/{old_port}"))
            && held.len() == 3,
        "{held:?}"
    );

    // A port another Service holds: 422, and nothing written.
    let (status, other) =
        create(&server, &service("other", json!({"type": "NodePort", "ports": [{"port": 8080}]}))).await?;
    ensure!(status == 201, "{other}");
    let theirs = other["spec"]["ports"][0]["nodePort"].clone();
    let before = (store.current_revision().await?, holds(&store).await?);
    let (status, refused) = patch(
        &server,
        "web",
        "json",
        &json!([{"op": "replace", "path": "/spec/ports/1/nodePort", "value": theirs}]),
    )
    .await?;
    let message = refused["message"].as_str().unwrap_or_default();
    ensure!(
        status == 422
            && message.contains("spec.ports[1].nodePort")
            && message.contains("provided port is already allocated"),
        "{refused}"
    );
    ensure!(before == (store.current_revision().await?, holds(&store).await?), "the store changed");
    ensure!(get(&server, "web").await?["metadata"]["resourceVersion"] == web["metadata"]["resourceVersion"]);

    // NodePort → ClusterIP: the node ports released, and another Service can take one of them.
    let released = web["spec"]["ports"][0]["nodePort"].clone();
    let (status, web) = patch(&server, "web", "merge", &json!({"spec": {"type": "ClusterIP"}})).await?;
    ensure!(
        status == 200
            && node_port_keys(&web).is_empty()
            && web["spec"].get("externalTrafficPolicy").is_none(),
        "{web}"
    );
    ensure!(held_by(&store, &uid).await? == BTreeSet::from([address.clone()]), "{:?}", holds(&store).await?);
    let (status, taker) = create(
        &server,
        &service("taker", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": released}]})),
    )
    .await?;
    ensure!(status == 201, "{taker}");

    // ClusterIP → ExternalName: the address released; and back, a new one allocated.
    let (status, web) = patch(
        &server,
        "web",
        "merge",
        &json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
    )
    .await?;
    ensure!(
        status == 200 && web["spec"].get("clusterIP").is_none() && web["spec"].get("clusterIPs").is_none(),
        "{web}"
    );
    ensure!(held_by(&store, &uid).await?.is_empty(), "{:?}", holds(&store).await?);
    let (status, web) =
        patch(&server, "web", "merge", &json!({"spec": {"type": "ClusterIP", "externalName": null}})).await?;
    ensure!(status == 200 && web["spec"]["clusterIPs"] == json!([web["spec"]["clusterIP"]]), "{web}");
    ensure!(held_by(&store, &uid).await? == BTreeSet::from([ip_key(&web)]), "{:?}", holds(&store).await?);

    // An ExternalName may not be given an address, nor a ClusterIP Service a node port.
    let (status, refused) =
        patch(&server, "web", "merge", &json!({"spec": {"ports": [{"port": 80, "nodePort": 31000}]}}))
            .await?;
    ensure!(
        status == 422 && refused["message"].as_str().is_some_and(|m| m.contains("may not be used")),
        "{refused}"
    );

    // Deleting releases exactly what each Service holds.
    let others = holds(&store)
        .await?
        .into_iter()
        .filter(|(_, owner)| uid != owner.as_str())
        .collect::<BTreeMap<_, _>>();
    let (status, _, _) = server.request("DELETE", &format!("{SERVICES}/web"), &[], b"").await?;
    ensure!(status == 200);
    ensure!(holds(&store).await? == others, "{:?}", holds(&store).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dry_runs_allocate_but_write_nothing() -> Result<()> {
    let (server, store) = server_and_store().await?;
    let before = (store.current_revision().await?, holds(&store).await?);
    let body = service("dry", json!({"type": "NodePort", "ports": [{"port": 80}]}));
    let (status, _, answer) =
        server.request("POST", &format!("{SERVICES}?dryRun=All"), &JSON, body.to_string().as_bytes()).await?;
    let answer: Value = serde_json::from_str(&answer)?;
    ensure!(
        status == 201
            && answer["spec"]["clusterIP"].is_string()
            && answer["spec"]["ports"][0]["nodePort"].is_i64(),
        "{answer}"
    );
    ensure!(before == (store.current_revision().await?, holds(&store).await?), "a dry-run create wrote");

    let (status, web) = create(&server, &service("web", json!({"ports": [{"port": 80}]}))).await?;
    ensure!(status == 201, "{web}");
    let before = (store.current_revision().await?, holds(&store).await?);
    let (status, _, answer) = server
        .request(
            "PATCH",
            &format!("{SERVICES}/web?dryRun=All"),
            &[("Content-Type", "application/merge-patch+json")],
            json!({"spec": {"type": "NodePort"}}).to_string().as_bytes(),
        )
        .await?;
    let answer: Value = serde_json::from_str(&answer)?;
    ensure!(
        status == 200
            && answer["spec"]["type"] == "NodePort"
            && answer["spec"]["ports"][0]["nodePort"].is_i64()
            && answer["spec"]["clusterIP"] == web["spec"]["clusterIP"],
        "{answer}"
    );
    ensure!(before == (store.current_revision().await?, holds(&store).await?), "a dry-run update wrote");
    ensure!(get(&server, "web").await? == web, "the Service changed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_node_port_range() -> Result<()> {
    // Three node ports: random picks collide with the holds a first attempt does not read, and the
    // attempts after read them all.
    let (server, store) = server_with_node_ports("30000-30002").await?;
    for name in ["a", "b", "c"] {
        let (status, created) =
            create(&server, &service(name, json!({"type": "NodePort", "ports": [{"port": 80}]}))).await?;
        ensure!(status == 201, "{created}");
    }
    let (status, full) =
        create(&server, &service("d", json!({"type": "NodePort", "ports": [{"port": 80}]}))).await?;
    ensure!(status == 500 && full["message"].as_str().is_some_and(|m| m.contains("range is full")), "{full}");
    let (status, web) = create(&server, &service("web", json!({"ports": [{"port": 80}]}))).await?;
    ensure!(status == 201, "{web}");
    let before = holds(&store).await?;
    let (status, full) = patch(&server, "web", "merge", &json!({"spec": {"type": "NodePort"}})).await?;
    ensure!(status == 500 && full["message"].as_str().is_some_and(|m| m.contains("range is full")), "{full}");
    ensure!(holds(&store).await? == before, "a failed update wrote");

    // The one port freed is the one found.
    let b = get(&server, "b").await?;
    let (status, _, _) = server.request("DELETE", &format!("{SERVICES}/b"), &[], b"").await?;
    ensure!(status == 200);
    let (status, web) = patch(&server, "web", "merge", &json!({"spec": {"type": "NodePort"}})).await?;
    ensure!(
        status == 200 && web["spec"]["ports"][0]["nodePort"] == b["spec"]["ports"][0]["nodePort"],
        "{web}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_node_ports() -> Result<()> {
    let (server, store) = server_and_store().await?;
    // A LoadBalancer keeping client addresses gets a health-check node port, held like the others.
    let spec = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]});
    let (status, lb) = create(&server, &service("lb", spec)).await?;
    ensure!(status == 201, "{lb}");
    let check = lb["spec"]["healthCheckNodePort"].as_i64().unwrap_or_default();
    ensure!(check != 0 && Some(check) != lb["spec"]["ports"][0]["nodePort"].as_i64(), "{lb}");
    let mut expected = node_port_keys(&lb);
    expected.insert(format!("/registry/servicenodeports/{check}"));
    expected.insert(ip_key(&lb));
    ensure!(held_by(&store, &lb["metadata"]["uid"]).await? == expected, "{lb}");
    // Nobody else gets it.
    let spec = json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": check}]});
    let (status, taken) = create(&server, &service("other", spec)).await?;
    ensure!(
        status == 422 && taken["message"].as_str().is_some_and(|m| m.contains("already allocated")),
        "{taken}"
    );
    // Kept across an update that leaves it out; given back when no longer needed.
    let (status, kept) =
        patch(&server, "lb", "merge", &json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}]}})).await?;
    ensure!(status == 200 && kept["spec"]["healthCheckNodePort"] == check, "{kept}");
    let (status, cluster) =
        patch(&server, "lb", "merge", &json!({"spec": {"externalTrafficPolicy": "Cluster"}})).await?;
    ensure!(status == 200 && cluster["spec"].get("healthCheckNodePort").is_none(), "{cluster}");
    ensure!(!holds(&store).await?.contains_key(&format!("/registry/servicenodeports/{check}")));
    // Only where it applies.
    let spec = json!({"type": "NodePort", "healthCheckNodePort": 31999, "ports": [{"port": 80}]});
    let (status, refused) = create(&server, &service("nope", spec)).await?;
    ensure!(
        status == 422 && refused["details"]["causes"][0]["field"] == "spec.healthCheckNodePort",
        "{refused}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_address_taken_and_dry_run_conflicts() -> Result<()> {
    let (server, store) = server_and_store().await?;
    // A dry-run create answers as the create would: the name exists.
    let (status, _, body) = server
        .request(
            "POST",
            &format!("{SERVICES}?dryRun=All"),
            &JSON,
            service("kubernetes", json!({"ports": [{"port": 1}]})).to_string().as_bytes(),
        )
        .await?;
    ensure!(status == 409, "{status} {body}");
    // The kubernetes Service gone and its address taken by another: a server starting on this store
    // still serves (upstream's reconciler only reports it).
    let (status, _, _) = server.request("DELETE", &format!("{SERVICES}/kubernetes"), &[], b"").await?;
    ensure!(status == 200);
    let (status, squatter) =
        create(&server, &service("squatter", json!({"clusterIP": "10.0.0.1", "ports": [{"port": 1}]})))
            .await?;
    ensure!(status == 201, "{squatter}");
    let address = "127.0.0.1:1".parse()?;
    let mut config = keel_apiserver::Config::new(address);
    config.services = ServiceRanges::parse("10.0.0.0/24", "30000-32767").map_err(anyhow::Error::msg)?;
    ensure!(keel_apiserver::ApiServer::new(store, config).await.is_ok(), "a second server did not start");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_node_ports_and_cluster_ips_alone() -> Result<()> {
    let (server, store) = server_and_store().await?;
    // DNS on TCP and UDP: one node port for both, one hold (upstream's initNodePorts).
    let dns = |name: &str, asked: Option<i64>| {
        let mut udp = json!({"name": "udp", "port": 53, "protocol": "UDP"});
        if let Some(port) = asked {
            udp["nodePort"] = port.into();
        }
        service(
            name,
            json!({"type": "NodePort", "ports": [{"name": "tcp", "port": 53, "protocol": "TCP"}, udp]}),
        )
    };
    let (status, first) = create(&server, &dns("dns", None)).await?;
    let ports = &first["spec"]["ports"];
    ensure!(
        status == 201 && ports[0]["nodePort"] == ports[1]["nodePort"] && ports[0]["nodePort"].is_i64(),
        "{first}"
    );
    ensure!(held_by(&store, &first["metadata"]["uid"]).await?.len() == 2, "one address and one node port");
    // A port asked for by the UDP entry is the TCP entry's too (one the first Service did not get).
    let wanted = if first["spec"]["ports"][0]["nodePort"] == 30999 { 30998 } else { 30999 };
    let (status, asked) = create(&server, &dns("dns-asked", Some(wanted))).await?;
    let ports = &asked["spec"]["ports"];
    ensure!(status == 201 && ports[0]["nodePort"] == wanted && ports[1]["nodePort"] == wanted, "{asked}");
    // The address given as clusterIPs alone; both given must agree.
    let (status, alone) =
        create(&server, &service("ips", json!({"clusterIPs": ["10.0.0.77"], "ports": [{"port": 1}]})))
            .await?;
    ensure!(status == 201 && alone["spec"]["clusterIP"] == "10.0.0.77", "{alone}");
    let spec = json!({"clusterIP": "10.0.0.78", "clusterIPs": ["10.0.0.79"], "ports": [{"port": 1}]});
    let (status, refused) = create(&server, &service("both", spec)).await?;
    ensure!(status == 422 && refused["details"]["causes"][0]["field"] == "spec.clusterIPs[0]", "{refused}");
    Ok(())
}
