//! The "image" group (beside critest's "Image Manager"): PullImage by tag (the image ref it answers, the
//! id's form, a size, RemoveImage by tag) and by digest (critest's digest case is skipped here: its
//! digest is fixed by the upstream build), ListImages with a filter, RemoveImage by a tag already removed
//! and by a missing reference. critest covers the status of an image that is not there (empty, no error:
//! after each of its removals) and status by id, tag and digest. It runs last: removing its image removes
//! every reference of that image, which may be the image the other groups use.

use super::support::rpc;
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "image";

/// Runs every case of the group.
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    vec![
        case(GROUP, "public image with tag should be pulled and removed", by_tag(client, env).await),
        case(GROUP, "public image with digest should be pulled and removed", by_digest(client, env).await),
        case(GROUP, "listing images", listing(client, env).await),
        case(GROUP, "removing an image twice", remove_twice(client, env).await),
    ]
}

fn spec(image: &str) -> Option<api::ImageSpec> {
    Some(api::ImageSpec { image: image.to_owned(), ..Default::default() })
}

/// PullImage; the image ref it answers.
pub async fn pull(client: &mut CriClient, image: &str) -> Result<String, tonic::Status> {
    let request = api::PullImageRequest { image: spec(image), auth: None, sandbox_config: None };
    Ok(client.image.pull_image(request).await?.into_inner().image_ref)
}

/// ImageStatus: `None` when the runtime has no such image.
pub async fn status(client: &mut CriClient, image: &str) -> Result<Option<api::Image>, String> {
    let request = api::ImageStatusRequest { image: spec(image), verbose: false };
    client
        .image
        .image_status(request)
        .await
        .map(|r| r.into_inner().image)
        .map_err(|s| rpc(&format!("ImageStatus({image})"), &s))
}

pub async fn remove(client: &mut CriClient, image: &str) -> Result<(), String> {
    let request = api::RemoveImageRequest { image: spec(image) };
    client.image.remove_image(request).await.map(drop).map_err(|s| rpc(&format!("RemoveImage({image})"), &s))
}

async fn list(client: &mut CriClient, filter: Option<&str>) -> Result<Vec<api::Image>, String> {
    let request =
        api::ListImagesRequest { filter: filter.map(|image| api::ImageFilter { image: spec(image) }) };
    client.image.list_images(request).await.map(|r| r.into_inner().images).map_err(|s| rpc("ListImages", &s))
}

/// Pulled by tag: the status has an id (`sha256:`), the tag among its repo tags, a size; removed, it has
/// no status.
async fn by_tag(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let image_ref = pull(client, &env.scratch_image).await.map_err(|s| rpc("PullImage", &s))?;
    ensure(!image_ref.is_empty(), || "PullImage answered an empty image ref".to_owned())?;
    let image = status(client, &env.scratch_image).await?.ok_or("no status after PullImage")?;
    ensure(image.id.starts_with("sha256:") && image.id.len() == 71, || format!("id {:?}", image.id))?;
    ensure(image_ref == image.id || image.repo_digests.contains(&image_ref), || {
        format!("image ref {image_ref:?} is neither the id nor a repo digest of {image:?}")
    })?;
    ensure(image.repo_tags.contains(&env.scratch_image), || {
        format!("repo tags {:?} lack {}", image.repo_tags, env.scratch_image)
    })?;
    ensure(image.size > 0, || format!("size {}", image.size))?;
    let by_id = status(client, &image.id).await?.ok_or("no status by id")?;
    ensure(by_id.id == image.id, || format!("status by id answered {}", by_id.id))?;
    remove(client, &env.scratch_image).await?;
    let after = status(client, &env.scratch_image).await?;
    ensure(after.is_none(), || format!("status after RemoveImage: {after:?}"))
}

/// Pulled by digest: the digest among its repo digests, and the status found by it; removed, it has no
/// status.
async fn by_digest(client: &mut CriClient, env: &Env) -> Result<(), String> {
    pull(client, &env.scratch_image_by_digest).await.map_err(|s| rpc("PullImage", &s))?;
    let image = status(client, &env.scratch_image_by_digest).await?.ok_or("no status after PullImage")?;
    ensure(image.repo_digests.contains(&env.scratch_image_by_digest), || {
        format!("repo digests {:?} lack {}", image.repo_digests, env.scratch_image_by_digest)
    })?;
    remove(client, &env.scratch_image_by_digest).await?;
    let after = status(client, &env.scratch_image_by_digest).await?;
    ensure(after.is_none(), || format!("status after RemoveImage: {after:?}"))
}

/// ListImages shows a pulled image, and with a filter naming it, that image alone.
async fn listing(client: &mut CriClient, env: &Env) -> Result<(), String> {
    pull(client, &env.scratch_image).await.map_err(|s| rpc("PullImage", &s))?;
    let image = status(client, &env.scratch_image).await?.ok_or("no status after PullImage")?;
    let all = list(client, None).await?;
    ensure(all.iter().any(|i| i.id == image.id), || format!("{} is not listed: {all:?}", image.id))?;
    let filtered = list(client, Some(&env.scratch_image)).await?;
    ensure(filtered.len() == 1 && filtered[0].id == image.id, || {
        format!("filtered by {}: {filtered:?}", env.scratch_image)
    })
}

/// RemoveImage of an image already removed succeeds.
async fn remove_twice(client: &mut CriClient, env: &Env) -> Result<(), String> {
    pull(client, &env.scratch_image).await.map_err(|s| rpc("PullImage", &s))?;
    remove(client, &env.scratch_image).await?;
    remove(client, &env.scratch_image).await?;
    remove(client, &env.missing_image).await?;
    Ok(())
}
