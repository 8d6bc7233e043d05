//! Deleting Workers the record lists: `--delete` (all of them) and a redeploy's pruning (those
//! the new shape no longer has: the shards past a smaller count, the objects' Workers once the
//! residency is `isolate`). Each Worker is deleted with its Durable Objects; one that does not
//! exist counts as deleted (and is said to); any other failure leaves it in the record and makes
//! the command fail, naming it, after trying the rest. The record goes only when every Worker it
//! lists is gone: a teardown never forgets something still running and billing.

use anyhow::{bail, Result};

use super::cloudflare::{Cloudflare, Deleted};
use super::configs::{role_of, Role};
use super::record::{Deployment, StateDir};

/// Deletes `doomed` (fronts before the objects' Workers they bind to), noting each in the
/// record; fails naming those that are left.
pub fn delete(
    cf: &dyn Cloudflare,
    state: &StateDir,
    record: &mut Deployment,
    doomed: &[String],
) -> Result<()> {
    let (mut ordered, objects): (Vec<&String>, Vec<&String>) =
        doomed.iter().partition(|w| role_of(w) == Role::Front);
    ordered.extend(objects);
    let mut failed = Vec::new();
    for worker in ordered {
        match cf.delete_worker(worker) {
            Ok(Deleted::Gone) => println!("deploy: deleted {worker}"),
            Ok(Deleted::NotFound) => println!("deploy: {worker} did not exist (deleted before)"),
            Err(e) => {
                eprintln!("deploy: {e:#}");
                failed.push(worker.clone());
                continue;
            }
        }
        record.remove_worker(worker);
        state.save(record)?;
    }
    if !failed.is_empty() {
        bail!(
            "still deployed, and billing: {} (the record in {} keeps them; run the same command \
             again once the cause above is fixed)",
            failed.join(", "),
            state.dir.display()
        );
    }
    Ok(())
}

/// `--delete`: every Worker of the deployment; then the record and the endpoint lists.
pub fn delete_all(cf: &dyn Cloudflare, state: &StateDir, record: &mut Deployment) -> Result<()> {
    let all = record.workers.clone();
    delete(cf, state, record, &all)?;
    state.forget()?;
    for list in super::ENDPOINT_LISTS {
        super::record::remove(&state.file(list))?;
    }
    println!(
        "deploy: deleted every Worker of {} ({} shards, their Durable Objects with them); the \
         token stays in {}. The model stays in R2 (npx wrangler r2 object delete …, or the \
         dashboard, if it should go too).",
        record.name,
        record.shards,
        state.file(super::token::CURRENT).display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::deploy::cloudflare::fake::Fake;
    use crate::deploy::record::example;

    #[test]
    fn a_failed_deletion_keeps_the_record_and_fails() {
        let cf = Fake::default();
        for w in ["d-s0", "d-s1", "d-s0-objects"] {
            cf.workers.borrow_mut().insert(w.into(), BTreeMap::new());
        }
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        // d-s1-objects does not exist: it counts as gone. The second deletion fails.
        let mut r = example(2, &["d-s0-objects", "d-s0", "d-s1-objects", "d-s1"]);
        state.save(&r).unwrap();
        *cf.fail_at.borrow_mut() = Some(2);
        let e = delete_all(&cf, &state, &mut r).unwrap_err().to_string();
        assert!(e.contains("d-s1") && e.contains("billing"), "{e}");
        assert_eq!(r.workers, vec!["d-s1".to_string()]);
        assert_eq!(state.load().unwrap(), Some(r.clone()));
        delete_all(&cf, &state, &mut r).unwrap();
        assert!(cf.workers.borrow().is_empty());
        assert_eq!(state.load().unwrap(), None);
    }
}
