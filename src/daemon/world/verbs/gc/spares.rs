//! `gc`'s sweep of spare clones (issue 51): a spare whose making or taking
//! a crash cut short, or whose golden template is gone or was rebuilt at
//! another key, is dropped on the server it was made on.

use super::{item, rendered, swept};
use crate::daemon::Daemon;
use crate::daemon::world::stages::reach::TornDown;
use crate::daemon::world::stages::slices::adapter_for;
use crate::daemon::world::stages::spares;
use crate::protocol::{ClientEnv, SweepItem, SweepKind, SweepResult};
use std::sync::Arc;

/// Sweeps the spares [`spares::to_sweep`] says go; runs after the
/// templates' sweep, so the spares of a template it dropped go too.
pub(super) async fn sweep_spares(
    d: &Arc<Daemon>,
    dry_run: bool,
    client_env: &ClientEnv,
    out: &mut Vec<SweepItem>,
) {
    let rows = d.registry(|r| r.spares()).unwrap_or_default();
    for row in rows {
        // Held while it is swept: no `up` takes it meanwhile.
        let Some((why, _flight)) = spares::to_sweep(d, &row).await else {
            continue;
        };
        let outcome = if dry_run {
            swept(true, Ok(()))
        } else {
            match adapter_for(d, &row.adapter, client_env) {
                None => swept(
                    false,
                    Err(format!("no adapter named {} in this build", row.adapter)),
                ),
                Some(adapter) => {
                    let candidates = rendered(
                        d,
                        (&row.project, &row.service),
                        adapter.as_ref(),
                        &row.name,
                        client_env,
                        None,
                    );
                    let r = match candidates {
                        Ok(c) => spares::sweep(d, adapter.as_ref(), &row, c).await,
                        Err(e) => Err(e),
                    };
                    match r {
                        Ok(TornDown::Deleted) => {
                            (SweepResult::Swept, "swept: spare dropped".into())
                        }
                        Ok(TornDown::NotFound) => (
                            SweepResult::Forgotten,
                            "forgotten: it was not on its server (nothing deleted)".into(),
                        ),
                        Err(e) => swept(false, Err(e)),
                    }
                }
            }
        };
        out.push(item(
            SweepKind::Spare,
            row.name.clone(),
            format!("{why} (project {}, template {})", row.project, row.template),
            outcome,
        ));
    }
}
