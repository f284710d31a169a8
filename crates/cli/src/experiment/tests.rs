//! `crossbow experiment tta`: variants, configurations, ranking and tables.

use super::*;

#[test]
fn variants_parse_settings_and_reject_nonsense() {
    let r = SyncRegistry::builtin();
    let text = |v: &str| Some(toml::Value::String(v.into()));
    // SMA's option flags are its options, as `opt.KEY` is.
    let v = parse_variant("sma/central-momentum=0/sma-form=local-momentum", &r).unwrap();
    assert_eq!(v.sync, "sma");
    let opts = v.file.sync_options.clone().unwrap();
    assert_eq!(opts.get("central-momentum").cloned(), text("0"));
    assert_eq!(opts.get("sma-form").cloned(), text("local-momentum"));
    assert!(v.only_sma_settings);
    let w = parse_variant("ssgd/weight-decay=0.001", &r).unwrap();
    assert!(!w.only_sma_settings);
    let o = parse_variant("sma/opt.bn-params=local/central-momentum=0/bn-group=device", &r).unwrap();
    assert!(o.only_sma_settings);
    let opts = o.file.sync_options.unwrap();
    assert_eq!(opts.get("bn-params").cloned(), text("local"));
    assert_eq!(opts.get("central-momentum").cloned(), text("0"));
    assert!(!parse_variant("periodic/opt.period=4", &r).unwrap().only_sma_settings);
    assert!(!parse_variant("easgd/alpha=0.1", &r).unwrap().only_sma_settings);
    assert!(parse_variant("sma/opt.=3", &r).is_err());
    for bad in ["", "/lr=1", "sma/central-momentum", "sma/=3", "sma/no-such-key=1"] {
        assert!(parse_variant(bad, &r).is_err(), "{bad}");
    }
}

#[test]
fn runs_to_the_end_read_target_and_final_accuracy_off_the_curve() {
    let pt = |epoch: f64, acc: f64| CurvePoint {
        epoch,
        train_seconds: 10.0 * epoch,
        test_accuracy: acc,
        spread: None,
        central_step: None,
        learner_accuracy: None,
    };
    let curve = vec![pt(0.5, 0.3), pt(1.0, 0.56), pt(1.5, 0.5), pt(2.0, 0.6), pt(2.5, 0.58), pt(3.0, 0.62)];
    let hit = first_at_or_above(&curve, 0.55).unwrap();
    assert_eq!((hit.epoch, hit.train_seconds), (1.0, 10.0));
    assert!(first_at_or_above(&curve, 0.7).is_none());
    // The last 1 epoch: evaluations after epoch 2.0 (2.5 and 3.0).
    assert!((final_accuracy(&curve, 1.0) - 0.60).abs() < 1e-12);
    // A window shorter than the evaluation interval still holds the last evaluation.
    assert!((final_accuracy(&curve, 0.1) - 0.62).abs() < 1e-12);
    assert_eq!(final_accuracy(&[], 2.0), 0.0);
    // Tuning by final accuracy prefers the higher plateau over the earlier hit.
    let run = |final_accuracy: f64, epochs_to_target: Option<f64>, error: Option<String>| Run {
        phase: "tune".into(),
        variant: "sma".into(),
        sync: "sma".into(),
        learners: 4,
        batch: 16,
        seed: 0,
        lr: 0.1,
        reached: epochs_to_target.is_some(),
        epochs_to_target,
        seconds_to_target: None,
        best_accuracy: final_accuracy,
        final_accuracy,
        epochs: 30.0,
        images_per_sec: 1.0,
        error,
        curve: vec![],
    };
    let (early, high, failed) =
        (run(0.55, Some(5.0), None), run(0.6, Some(9.0), None), run(0.0, None, Some("x".into())));
    assert!(rank_final(&high) < rank_final(&early));
    assert!(rank_final(&early) < rank_final(&failed));
    assert!(rank(&early) < rank(&high));
}

#[test]
fn medians_count_misses_and_k1_merges() {
    assert_eq!(median_with_misses(&[Some(1.0), None, Some(2.0)]), Some(2.0));
    assert_eq!(median_with_misses(&[Some(1.0), None, None]), None);
    assert_eq!(median_with_misses(&[Some(1.0), Some(3.0)]), Some(2.0));
    let args = TtaArgs {
        model: "lenet5".into(),
        dataset: "synthetic-digits".into(),
        data_dir: None,
        sync: vec!["sma".into(), "sma/central-momentum=0".into(), "ssgd".into(), "easgd".into()],
        learners: vec![1, 4],
        batch_size: vec![16],
        seeds: 5,
        tune_seed: 0,
        target: 0.9,
        epochs: 1.0,
        lr: vec![0.01, 0.02],
        no_ssgd_linear_scaling: false,
        momentum: 0.9,
        weight_decay: 0.0,
        eval_every: 0.5,
        train_size: None,
        test_size: None,
        threads: None,
        bn_eval: None,
        diagnostics: false,
        run_to_end: false,
        final_epochs: 2.0,
        tune_by: "epochs".into(),
        resume: false,
        out: PathBuf::from("x"),
    };
    let vs: Vec<Variant> = args.sync.iter().map(|s| parse_variant(s, &SyncRegistry::builtin()).unwrap()).collect();
    let cs = configs(&args, &vs);
    // k = 1: sma, sma/cm=0 and ssgd are one configuration; easgd its own. k = 4: four.
    assert_eq!(cs.iter().filter(|c| c.k == 1).count(), 2);
    assert_eq!(cs.iter().find(|c| c.k == 1).unwrap().labels.len(), 3);
    assert_eq!(cs.iter().filter(|c| c.k == 4).count(), 4);
    let ssgd4 = cs.iter().find(|c| c.k == 4 && c.variant.sync == "ssgd").unwrap();
    assert_eq!(ssgd4.lrs, vec![0.01, 0.02, 0.04, 0.08]);
    let sma4 = cs.iter().find(|c| c.k == 4 && c.variant.sync == "sma").unwrap();
    assert_eq!(sma4.lrs, vec![0.01, 0.02]);
}
