//! `gc`'s sweep of login users Binky made (a PostgreSQL role, a RabbitMQ
//! user) whose slice is gone.

use super::{item, rendered, swept};
use crate::config;
use crate::daemon::Daemon;
use crate::daemon::world::stages::reach::tear_down;
use crate::daemon::world::stages::slices::adapter_for;
use crate::protocol::{ClientEnv, SweepItem, SweepKind};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// 4. Login users Binky made for a slice that is gone, on the servers the
///    known projects' configs name: each torn down as its slice (which
///    drops only a user marked as Binky's). Only names a project's own
///    naming rule gives, and none the registry still records.
pub(super) async fn sweep_users(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let projects = d.registry(|r| r.projects()).unwrap_or_default();
    let mut seen = HashSet::new();
    for (_, project, root) in projects {
        let Ok(cfg) = config::load(&Path::new(&root).join(config::FILE_NAME)) else {
            continue;
        };
        for (service, s) in &cfg.services {
            let Some(r) = s.resource() else { continue };
            let Some(adapter) = adapter_for(d, &r.adapter, client_env) else {
                continue;
            };
            if !adapter.facts().world_users {
                continue;
            }
            // The server is reached as the project's resource renders it;
            // the name is the project's prefix, no slice's, and nothing is
            // recorded for it (a dry run writes nothing).
            let own = adapter.slice_prefix(&project);
            let Ok(candidates) = rendered(
                d,
                (&project, service),
                adapter.as_ref(),
                &own,
                client_env,
                None,
            ) else {
                continue;
            };
            let Some(at) = candidates.into_iter().next() else {
                continue;
            };
            let Ok(names) = adapter.orphan_users(&at).await else {
                continue;
            };
            for name in names {
                let recorded = d
                    .registry(|r| r.slice_owner(adapter.name(), &name))
                    .ok()
                    .flatten()
                    .is_some();
                if !name.starts_with(&own) || recorded || !seen.insert(name.clone()) {
                    continue;
                }
                let slice = crate::adapters::Slice {
                    name: name.clone(),
                    ..at.clone()
                };
                let outcome = if dry_run {
                    swept(true, Ok(()))
                } else {
                    let r = tear_down(adapter.as_ref(), &slice)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.redacted(&slice).message);
                    if r.is_ok() {
                        let _ = d.registry(|r| r.delete_slice(adapter.name(), &name));
                    }
                    swept(false, r)
                };
                out.push(item(
                    SweepKind::User,
                    format!("{} user {name}", adapter.name()),
                    format!(
                        "a login user Binky made for a slice of project {project} that is gone"
                    ),
                    outcome,
                ));
            }
        }
    }
}
