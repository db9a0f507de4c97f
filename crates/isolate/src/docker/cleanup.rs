//! Removing a job's containers, networks and own volumes, found by label.

use super::client::is_not_found;
use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions,
};
use futures::future::join_all;
use std::collections::HashMap;

/// What a removal pass did.
#[derive(Debug, Default)]
pub(crate) struct Removed {
    /// Containers and networks removed.
    pub count: usize,
    /// What could not be removed, and why.
    pub errors: Vec<String>,
}

/// Labels of a container or network.
type Labels = HashMap<String, String>;

/// Removes (forcibly, with their anonymous volumes) the containers matching `filters` plus
/// `extra` ids, then the networks matching `filters`, skipping anything whose labels `keep`
/// says must stay.
pub(crate) async fn remove_matching(
    docker: &Docker,
    filters: HashMap<String, Vec<String>>,
    extra: &[String],
    keep: &(dyn Fn(&Labels) -> bool + Sync),
) -> Removed {
    let empty = Labels::new();
    let mut removed = Removed::default();
    let listed = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        }))
        .await;
    let mut ids: Vec<String> = extra.to_vec();
    match listed {
        Ok(list) => ids.extend(
            list.into_iter()
                .filter(|c| !keep(c.labels.as_ref().unwrap_or(&empty)))
                .filter_map(|c| c.id),
        ),
        Err(e) => removed.errors.push(format!("listing containers: {e}")),
    }
    ids.sort();
    ids.dedup();
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    let results = join_all(ids.iter().map(|id| {
        let options = options.clone();
        async move { (id, docker.remove_container(id, Some(options)).await) }
    }))
    .await;
    for (id, r) in results {
        match r {
            Ok(()) => removed.count += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => removed.errors.push(format!("removing container {id}: {e}")),
        }
    }
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters.clone()),
        }))
        .await;
    match networks {
        Ok(list) => {
            for n in list {
                if keep(n.labels.as_ref().unwrap_or(&empty)) {
                    continue;
                }
                let Some(id) = n.id.or(n.name) else { continue };
                match docker.remove_network(&id).await {
                    Ok(()) => removed.count += 1,
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => removed.errors.push(format!("removing network {id}: {e}")),
                }
            }
        }
        Err(e) => removed.errors.push(format!("listing networks: {e}")),
    }
    // Volumes a job made for itself (`disable_cache`); the kept cache volumes carry no label
    // and are never listed here.
    let volumes = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters),
        }))
        .await;
    match volumes {
        Ok(list) => {
            for v in list.volumes.unwrap_or_default() {
                if keep(&v.labels) {
                    continue;
                }
                match docker
                    .remove_volume(&v.name, None::<RemoveVolumeOptions>)
                    .await
                {
                    Ok(()) => removed.count += 1,
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => removed
                        .errors
                        .push(format!("removing volume {}: {e}", v.name)),
                }
            }
        }
        Err(e) => removed.errors.push(format!("listing volumes: {e}")),
    }
    removed
}
