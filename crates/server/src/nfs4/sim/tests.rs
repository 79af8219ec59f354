use super::*;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seeds CI runs (32 × 2,000 steps by default; `scripts/simulate.sh`
/// sets the variables to run more).
#[test]
fn seeds_keep_the_invariants() {
    let first = env("TARN_SIM_FIRST_SEED", 0);
    let seeds = env("TARN_SIM_SEEDS", 32);
    let steps = env("TARN_SIM_STEPS", 2000) as usize;
    let mut failed = Vec::new();
    for seed in first..first + seeds {
        if let Err(report) = simulate(seed, steps) {
            eprintln!("{report}");
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "seeds that failed: {failed:?}");
}

/// The same seed gives the same steps, so a replay reproduces a failure.
#[test]
fn a_seed_is_deterministic() {
    let run = |seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut w = World::new();
        (0..500)
            .map(|_| {
                let s = w.generate(&mut rng);
                w.step(&s).unwrap();
                s
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
}

/// The simulation reaches what it is meant to: restarts with reclaims,
/// courteous and expired clients, slot replays, conflicts of both kinds.
#[test]
fn the_generator_reaches_the_interesting_cases() {
    let mut rng = StdRng::seed_from_u64(1);
    let mut w = World::new();
    for _ in 0..4000 {
        let s = w.generate(&mut rng);
        w.step(&s).unwrap();
    }
    let s = &w.stats;
    eprintln!("{s:?}");
    for (what, n) in [
        ("opens", s.opens),
        ("share denials", s.share_denied),
        ("locks", s.locks),
        ("lock denials", s.lock_denied),
        ("NLM locks", s.nlm_locks),
        ("replays", s.replays),
        ("reclaims", s.reclaims),
        ("restarts", s.restarts),
        ("courteous clients", s.courteous),
        ("expiries", s.expired),
        ("conflict expiries", s.conflict_expired),
        ("unmounts", s.unmounts),
        ("delegations", s.delegations),
        ("write delegations", s.write_delegations),
        ("opens waiting for a recall", s.recall_waits),
        ("delegations returned when recalled", s.delegations_returned),
        ("directory delegations", s.dir_delegations),
        ("directory changes", s.dir_changes),
        ("directory changes waiting for a recall", s.dir_recall_waits),
    ] {
        assert!(n >= 3, "only {n} {what}");
    }
}
