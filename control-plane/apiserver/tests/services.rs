//! Services get ClusterIPs and NodePorts from the configured ranges, never one twice (also under
//! concurrent creates), keep them across updates, and give them back when deleted; the
//! `kubernetes` Service names the apiserver.

mod common;

use std::collections::HashSet;

use anyhow::{Result, ensure};
use common::Server;
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
    let moved = json!([{"op": "replace", "path": "/spec/clusterIP", "value": "10.0.0.250"}]).to_string();
    let (status, _, body) = server
        .request(
            "PATCH",
            &format!("{SERVICES}/again"),
            &[("Content-Type", "application/json-patch+json")],
            moved.as_bytes(),
        )
        .await?;
    ensure!(status == 422 && body.contains("field is immutable"), "{status} {body}");

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
