//! Token rotation without a failed request, as a state machine the record keeps
//! ([`Rotation`]), so that a call cut short is resumed by the next one and no step can revoke a
//! token a caller still uses:
//!
//! 1. `--rotate-token` from `none`: a new token goes to `token.next` and the current one to
//!    `token.previous`, both before any front changes; state `spreading`.
//! 2. Each front not yet done gets both in one version (`AUTH_TOKEN` = new, `AUTH_TOKEN_PREVIOUS`
//!    = old); the record notes it after each. `--rotate-token` in `spreading` resumes here.
//! 3. Every front accepts both: the new token becomes `token`; state `spread`. Callers move to it.
//! 4. `--finish-rotation` from `spread`: each front not yet done drops `AUTH_TOKEN_PREVIOUS`;
//!    state `finishing` meanwhile, resumed by the next `--finish-rotation`.
//! 5. Every front accepts the new token alone: `token.previous` is removed; state `none`.
//!
//! A second `--rotate-token` while both are accepted is refused (it would make the new token the
//! "previous" one and stop the old one at once), and so is `--finish-rotation` before every front
//! has the new token. Only fronts hold the token (object scripts have no secret: no object
//! restarts), and only the fronts the record lists.

use anyhow::{bail, Result};

use cobordism_protocol::{PREVIOUS_TOKEN_SECRET, TOKEN_SECRET};

use super::cloudflare::Cloudflare;
use super::configs::{worker_name, Role};
use super::record::{Deployment, Rotation, StateDir};
use super::token::{self, CURRENT, NEXT, PREVIOUS};

/// `--rotate-token`: starts a rotation, or resumes one cut short.
pub fn rotate(cf: &dyn Cloudflare, state: &StateDir, record: &mut Deployment) -> Result<()> {
    let mut done = match &record.token {
        Rotation::None => {
            let current = token::require(state, CURRENT)?;
            token::write(state, PREVIOUS, &current)?;
            token::write(state, NEXT, &token::new_token()?)?;
            record.token = Rotation::Spreading { done: vec![] };
            state.save(record)?;
            vec![]
        }
        Rotation::Spreading { done } => {
            eprintln!(
                "deploy: resuming the rotation ({} of {} fronts accept the new token)",
                done.len(),
                record.shards
            );
            done.clone()
        }
        Rotation::Spread | Rotation::Finishing { .. } => bail!(
            "a rotation is under way ({}): once every caller uses the new token in {}, finish \
             it with `cobordism deploy --finish-rotation`; a new rotation before that would stop \
             the token callers may still use",
            record.token,
            state.file(CURRENT).display()
        ),
    };
    let old = token::require(state, PREVIOUS)?;
    // Cut short after `token` took the new one but before the record said so: it is in `token`.
    let new = match token::read(state, NEXT)? {
        Some(next) => next,
        None => token::require(state, CURRENT)?,
    };
    let secrets = serde_json::json!({ TOKEN_SECRET: new, PREVIOUS_TOKEN_SECRET: old }).to_string();
    for shard in 0..record.shards {
        if done.contains(&shard) {
            continue;
        }
        cf.put_secrets(&worker_name(&record.name, shard, Role::Front), &secrets)?;
        done.push(shard);
        record.token = Rotation::Spreading { done: done.clone() };
        state.save(record)?;
    }
    token::write(state, CURRENT, &new)?;
    token::delete(state, NEXT)?;
    record.token = Rotation::Spread;
    state.save(record)?;
    let file = state.file(CURRENT);
    println!(
        "deploy: {} fronts accept the new token (in {}) and the previous one.",
        record.shards,
        file.display()
    );
    println!(
        "Move every caller to the new token (export COBORDISM_TOKEN=\"$(cat {})\"; an inference \
         Worker's SHARD_TOKEN secret), then: cobordism deploy --finish-rotation",
        file.display()
    );
    Ok(())
}

/// `--finish-rotation`: the previous token stops working on every front.
pub fn finish(cf: &dyn Cloudflare, state: &StateDir, record: &mut Deployment) -> Result<()> {
    let mut done = match &record.token {
        Rotation::None => bail!("no token rotation is under way (`--rotate-token` starts one)"),
        Rotation::Spreading { done } => bail!(
            "the rotation has reached {} of {} fronts: `cobordism deploy --rotate-token` resumes \
             it; finish it once every front and caller has the new token",
            done.len(),
            record.shards
        ),
        Rotation::Spread => vec![],
        Rotation::Finishing { done } => done.clone(),
    };
    for shard in 0..record.shards {
        if done.contains(&shard) {
            continue;
        }
        let front = worker_name(&record.name, shard, Role::Front);
        cf.delete_secret(&front, PREVIOUS_TOKEN_SECRET)?;
        done.push(shard);
        record.token = Rotation::Finishing { done: done.clone() };
        state.save(record)?;
    }
    token::delete(state, PREVIOUS)?;
    record.token = Rotation::None;
    state.save(record)?;
    println!(
        "deploy: {} fronts accept only the token in {}.",
        record.shards,
        state.file(CURRENT).display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::deploy::cloudflare::fake::Fake;
    use crate::deploy::record::example;

    fn deployed(cf: &Fake, state: &StateDir, shards: usize) -> Deployment {
        token::write(state, CURRENT, "old").unwrap();
        for shard in 0..shards {
            let secrets = BTreeMap::from([(TOKEN_SECRET.to_string(), "old".to_string())]);
            cf.workers
                .borrow_mut()
                .insert(format!("d-s{shard}"), secrets);
        }
        example(shards, &[])
    }

    /// The tokens each front accepts.
    fn accepted(cf: &Fake, shards: usize) -> Vec<Vec<String>> {
        (0..shards)
            .map(|s| cf.secrets(&format!("d-s{s}")).into_values().collect())
            .collect()
    }

    #[test]
    fn a_rotation_cut_short_resumes_and_never_drops_the_old_token() {
        let cf = Fake::default();
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        let mut record = deployed(&cf, &state, 3);
        *cf.fail_at.borrow_mut() = Some(2);
        assert!(rotate(&cf, &state, &mut record).is_err());
        assert_eq!(record.token, Rotation::Spreading { done: vec![0] });
        assert_eq!(state.load().unwrap().unwrap(), record);
        let new = token::require(&state, NEXT).unwrap();
        assert_eq!(token::require(&state, CURRENT).unwrap(), "old");
        assert_eq!(accepted(&cf, 3)[0], vec![new.clone(), "old".into()]);
        assert_eq!(accepted(&cf, 3)[1], vec!["old".to_string()]);
        // Finishing now would stop the old token on shard 0 while shards 1, 2 lack the new one.
        let e = finish(&cf, &state, &mut record).unwrap_err().to_string();
        assert!(e.contains("--rotate-token"), "{e}");
        rotate(&cf, &state, &mut record).unwrap();
        assert_eq!(record.token, Rotation::Spread);
        assert_eq!(token::require(&state, CURRENT).unwrap(), new);
        assert_eq!(token::require(&state, PREVIOUS).unwrap(), "old");
        assert!(accepted(&cf, 3)
            .iter()
            .all(|t| t == &[new.clone(), "old".into()]));
        // A second rotation before the first finishes is refused, and changes nothing.
        let calls = *cf.calls.borrow();
        let e = rotate(&cf, &state, &mut record).unwrap_err().to_string();
        assert!(e.contains("--finish-rotation"), "{e}");
        assert_eq!(*cf.calls.borrow(), calls);
        *cf.fail_at.borrow_mut() = Some(calls + 2);
        assert!(finish(&cf, &state, &mut record).is_err());
        assert_eq!(record.token, Rotation::Finishing { done: vec![0] });
        finish(&cf, &state, &mut record).unwrap();
        assert_eq!(record.token, Rotation::None);
        assert!(accepted(&cf, 3)
            .iter()
            .all(|t| t == std::slice::from_ref(&new)));
        assert_eq!(token::read(&state, PREVIOUS).unwrap(), None);
    }

    #[test]
    fn a_rotation_cut_after_the_token_file_moved_resumes_with_the_same_tokens() {
        let cf = Fake::default();
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        let mut record = deployed(&cf, &state, 2);
        rotate(&cf, &state, &mut record).unwrap();
        let new = token::require(&state, CURRENT).unwrap();
        // As if the record had not been saved after `token` took the new token.
        record.token = Rotation::Spreading { done: vec![0, 1] };
        rotate(&cf, &state, &mut record).unwrap();
        assert_eq!(token::require(&state, CURRENT).unwrap(), new);
        assert_eq!(token::require(&state, PREVIOUS).unwrap(), "old");
        assert!(accepted(&cf, 2)
            .iter()
            .all(|t| t == &[new.clone(), "old".into()]));
    }

    #[test]
    fn finishing_without_a_rotation_is_refused() {
        let cf = Fake::default();
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            dir: dir.path().into(),
        };
        let mut record = deployed(&cf, &state, 1);
        assert!(finish(&cf, &state, &mut record).is_err());
        assert_eq!(*cf.calls.borrow(), 0);
    }
}
