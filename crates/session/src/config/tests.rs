//! Tests of the configuration: flags and files validated, errors naming what was written.

use super::*;

#[test]
fn an_unknown_key_names_the_closest_not_every_key() {
    let e = TrainFile::parse("learner-per-device = 2\n", Path::new("r.toml")).unwrap_err().to_string();
    assert_eq!(
        e,
        "config file r.toml: line 1, key learner-per-device: unknown key `learner-per-device`; did you mean `learners-per-device`? (crossbow train --help lists them)"
    );
    let e = TrainFile::parse("colour = 2\n", Path::new("r.toml")).unwrap_err().to_string();
    assert!(e.ends_with("unknown key `colour` (crossbow train --help lists the keys)"), "{e}");
    assert_eq!(closest("lr", ["lr", "epochs"].into_iter()), Some("lr"));
    assert_eq!(closest("xyz", ["lr", "epochs"].into_iter()), None);
}
use crossbow_data::DatasetKind;
use crossbow_replica::ModelKind;

#[test]
fn defaults_are_the_built_in_run() {
    let c = TrainConfig::from_file(TrainFile::default()).unwrap();
    assert_eq!(c.model, ModelKind::LeNet5);
    assert_eq!(c.dataset, DatasetKind::SyntheticDigits);
    assert_eq!(c.learners_per_device, LearnersPerDevice::Auto);
    assert_eq!(c.devices, DeviceSpec::Auto);
}

#[test]
fn flags_override_the_file() {
    let file: TrainFile = toml::from_str("model = \"resnet20\"\nbatch-size = 64\nlr = 0.1\n").unwrap();
    let flags = TrainFile { batch_size: Some(16), ..Default::default() };
    let c = TrainConfig::from_file(file.overridden_by(flags)).unwrap();
    assert_eq!(c.model, ModelKind::ResNetCifar(20));
    assert_eq!(c.batch_size, 16);
    assert_eq!(c.lr, 0.1);
}

#[test]
fn all_reduce_is_parsed_and_nccl_needs_gpus() {
    assert_eq!(TrainConfig::from_file(TrainFile::default()).unwrap().all_reduce, AllReduceChoice::Auto);
    let file: TrainFile = toml::from_str("all-reduce = \"nccl\"\ndevices = \"cuda:0\"\n").unwrap();
    assert_eq!(file.keys(), ["devices", "all-reduce"]);
    assert_eq!(TrainConfig::from_file(file).unwrap().all_reduce, AllReduceChoice::Nccl);
    let bad = TrainFile { all_reduce: Some("mpi".into()), ..Default::default() };
    let e = TrainConfig::from_file(bad).unwrap_err().to_string();
    assert!(e.contains("--all-reduce") && e.contains("'mpi'"), "{e}");
    let cpu = TrainFile { all_reduce: Some("nccl".into()), devices: Some("cpu:2".into()), ..Default::default() };
    let e = TrainConfig::from_file(cpu).unwrap_err().to_string();
    assert!(e.contains("--all-reduce nccl sums GPU buffers") && e.contains("--devices is cpu:2"), "{e}");
    let host = TrainFile { all_reduce: Some("host".into()), devices: Some("cpu".into()), ..Default::default() };
    assert_eq!(TrainConfig::from_file(host).unwrap().all_reduce, AllReduceChoice::Host);
}

#[test]
fn bad_values_name_the_flag() {
    let cases: Vec<(TrainFile, &str)> = vec![
        (TrainFile { model: Some("alexnet".into()), ..Default::default() }, "--model"),
        (TrainFile { dataset: Some("imagenet".into()), ..Default::default() }, "--dataset"),
        (TrainFile { batch_size: Some(0), ..Default::default() }, "--batch-size"),
        (TrainFile { lr: Some(-1.0), ..Default::default() }, "--lr"),
        (TrainFile { momentum: Some(1.5), ..Default::default() }, "--momentum"),
        (TrainFile { schedule: Some("steps".into()), ..Default::default() }, "--schedule"),
        (TrainFile { devices: Some("tpu".into()), ..Default::default() }, "--devices"),
        (TrainFile { learners_per_device: Some("0".into()), ..Default::default() }, "--learners-per-device"),
        (TrainFile { sync: Some("hogwild".into()), ..Default::default() }, "--sync"),
        (TrainFile { target_accuracy: Some(140.0), ..Default::default() }, "--target-accuracy"),
        (
            TrainFile { dataset: Some("mnist".into()), data_dir: Some("/nonexistent/x".into()), ..Default::default() },
            "--data-dir",
        ),
    ];
    for (f, flag) in cases {
        let e = TrainConfig::from_file(f).unwrap_err().to_string();
        assert!(e.contains(flag), "{flag}: {e}");
    }
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crossbow-cfg-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

fn from_text(path: &Path, text: &str, flags: TrainFile) -> Result<TrainConfig, SessionError> {
    let file = TrainFile::parse(text, path)?;
    TrainConfig::from_sources(Some((path, file)), flags, &SyncRegistry::builtin())
}

#[test]
fn values_from_the_config_file_are_named_by_file_and_key() {
    let p = temp_file("named", "");
    let file = format!("config file {}", p.display());
    for (text, key) in [
        ("batch-size = 0", "batch-size"),
        ("lr = nan", "lr"),
        ("lr = inf", "lr"),
        ("momentum = 1.0", "momentum"),
        ("momentum = nan", "momentum"),
        ("weight-decay = -1", "weight-decay"),
        ("weight-decay = nan", "weight-decay"),
        ("sync = \"sma\"\ncentral-momentum = nan", "central-momentum"),
        ("sync = \"sma\"\nalpha = -0.5", "alpha"),
        ("sync = \"sma\"\nalpha = 1.7e56", "alpha"),
        ("lr = 1e300", "lr"),
        ("weight-decay = 1e39", "weight-decay"),
        ("epochs = 0", "epochs"),
        ("eval-batch-size = 0", "eval-batch-size"),
        ("learners-per-device = 0", "learners-per-device"),
        ("learners-per-device = \"many\"", "learners-per-device"),
        ("devices = \"tpu\"", "devices"),
        ("devices = \"cpu:100000\"", "devices"),
        ("threads = 100000", "threads"),
        ("sync = \"hogwild\"", "sync"),
        ("sync = \"sma\"\nsma-form = \"fancy\"", "sma-form"),
        ("bn-eval = \"sometimes\"", "bn-eval"),
        ("schedule = \"steps\"", "schedule"),
        ("model = \"alexnet\"", "model"),
        ("dataset = \"mnist\"", "dataset"),
        ("nesterov = true\nmomentum = 0.0", "nesterov"),
        ("sync = \"sma\"\n[sync-options]\nperiod = 3", "[sync-options] period"),
        // Values with control characters: the message quotes them escaped, on one line.
        ("schedule = \"sy\\nthetic-digits\"", "schedule"),
        ("model = \"lenet\\t5\"", "model"),
        ("dataset = \"digits\\r\\n\"", "dataset"),
        ("devices = \"cpu\\n:1\"", "devices"),
        ("sync = \"s\\u001bma\"", "sync"),
    ] {
        let e = from_text(&p, text, TrainFile::default()).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{file}: {key}")), "{text}: {e}");
        assert!(!e.contains('\n'), "{text}: {e}");
    }
    let e = from_text(&p, "schedule = \"sy\\nthetic-digits\"", TrainFile::default()).unwrap_err().to_string();
    assert!(e.contains("'sy\\nthetic-digits'"), "{e}");
    // The same key given as a flag too: the flag's value is used and named.
    let flags = TrainFile { lr: Some(-1.0), ..TrainFile::default() };
    let e = from_text(&p, "lr = 0.1", flags).unwrap_err().to_string();
    assert_eq!(e, "--lr must be a positive number, got -1");
    // A bad value from the file replaced by a good flag is no error.
    let flags = TrainFile { batch_size: Some(8), ..TrainFile::default() };
    assert_eq!(from_text(&p, "batch-size = 0", flags).unwrap().batch_size, 8);
    std::fs::remove_dir_all(p.parent().unwrap()).ok();
}

#[test]
fn learners_per_device_is_a_number_or_auto_in_a_file() {
    let p = temp_file("learners", "");
    let k = |text: &str| from_text(&p, text, TrainFile::default()).map(|c| c.learners_per_device);
    assert_eq!(k("learners-per-device = 2").unwrap(), LearnersPerDevice::Fixed(2));
    assert_eq!(k("learners-per-device = \"3\"").unwrap(), LearnersPerDevice::Fixed(3));
    assert_eq!(k("learners-per-device = \"auto\"").unwrap(), LearnersPerDevice::Auto);
    for bad in ["learners-per-device = -1", "learners-per-device = 2.5", "learners-per-device = true"] {
        let e = k(bad).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()) && e.contains("learners-per-device"), "{bad}: {e}");
    }
    std::fs::remove_dir_all(p.parent().unwrap()).ok();
}

/// A synchroniser's option with a flag of its own is a top-level key of a config file.
#[test]
fn option_flags_are_config_keys() {
    let p = temp_file("option-keys", "");
    let cfg = from_text(&p, "sync = \"sma\"\nalpha = 0.1\ncentral-momentum = 0\n", TrainFile::default()).unwrap();
    assert_eq!(cfg.sync_options.get("alpha").map(String::as_str), Some("0.1"));
    assert_eq!(cfg.sync_options.get("central-momentum").map(String::as_str), Some("0"));
    let e = from_text(&p, "sync = \"ssgd\"\nalpha = 0.1\n", TrainFile::default()).unwrap_err().to_string();
    let file = p.display().to_string();
    assert!(e.starts_with(&format!("config file {file}: alpha is not a setting of --sync ssgd")), "{e}");
    let e = from_text(&p, "sync = \"sma\"\nalpha = 0.1\n[sync-options]\nalpha = 0.2\n", TrainFile::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("given twice"), "{e}");
    std::fs::remove_dir_all(p.parent().unwrap()).ok();
}

/// Issue 22, item 4, and issue 49: every model defaults to S-SGD (SMA measured behind it on
/// real images, LeNet-5 on Fashion-MNIST included); SMA's settings without `--sync` are an
/// error naming them, not ignored.
#[test]
fn every_model_defaults_to_ssgd_and_sma_settings_need_sync_sma() {
    let cfg = |model: &str, more: TrainFile| {
        TrainConfig::from_file(TrainFile { model: Some(model.into()), devices: Some("cpu".into()), ..more })
    };
    for (model, sync) in
        [("lenet5", "ssgd"), ("resnet20", "ssgd"), ("resnet32", "ssgd"), ("vgg16", "ssgd"), ("resnet50", "ssgd")]
    {
        assert_eq!(cfg(model, TrainFile::default()).unwrap().sync, sync, "{model}");
    }
    // Given explicitly, either synchroniser is taken as written.
    let opt = |k: &str, v: &str| Some(BTreeMap::from([(k.to_string(), toml::Value::String(v.into()))]));
    let sma = TrainFile { sync: Some("sma".into()), sync_options: opt("alpha", "0.5"), ..TrainFile::default() };
    assert_eq!(cfg("resnet20", sma).unwrap().sync, "sma");
    let ssgd = TrainFile { sync: Some("ssgd".into()), ..TrainFile::default() };
    assert_eq!(cfg("lenet5", ssgd).unwrap().sync, "ssgd");
    // SMA's settings with --sync sma are fine, on any model; without it LeNet-5 refuses them too.
    let sma = TrainFile { sync: Some("sma".into()), sync_options: opt("alpha", "0.5"), ..TrainFile::default() };
    assert!(cfg("lenet5", sma).is_ok());
    let e = cfg("lenet5", TrainFile { sync_options: opt("alpha", "0.5"), ..TrainFile::default() }).unwrap_err();
    assert!(
        e.to_string().contains("lenet5 trains with ssgd by default") && e.to_string().contains("--sync sma"),
        "{e}"
    );
    for (more, named) in [
        (TrainFile { sync_options: opt("alpha", "0.5"), ..TrainFile::default() }, "--alpha"),
        (TrainFile { sync_options: opt("central-momentum", "0"), ..TrainFile::default() }, "--central-momentum"),
        (TrainFile { sync_options: opt("sma-form", "paper"), ..TrainFile::default() }, "--sma-form"),
        (TrainFile { sync_options: opt("alpha-rule", "1/sqrt(k)"), ..TrainFile::default() }, "--sync-opt alpha-rule"),
    ] {
        let e = cfg("resnet20", more).unwrap_err().to_string();
        assert!(
            e.contains(named) && e.contains("resnet20 trains with ssgd by default") && e.contains("--sync sma"),
            "{e}"
        );
    }
    // From a config file: the error names the file and says what to add to it.
    let p = temp_file("sma-settings", "");
    let e = from_text(
        &p,
        "model = \"resnet20\"\nalpha = 0.5\n[sync-options]\ncentral-step = \"mean\"\n",
        TrainFile::default(),
    )
    .unwrap_err()
    .to_string();
    let file = p.display().to_string();
    assert!(
        e.contains(&format!("config file {file}: alpha, config file {file}: [sync-options] central-step set sma"))
            && e.contains("add sync = \"sma\" to the file"),
        "{e}"
    );
    std::fs::remove_dir_all(p.parent().unwrap()).ok();
}

/// A `[sync-options]` value of the wrong type names the file, also when the key has
/// spaces or tabs around it (found by `config_fuzz`: `"\ta" = { a = 1 }`).
#[test]
fn a_bad_sync_option_value_names_the_file_whatever_its_key_spacing() {
    let p = Path::new("fuzz.toml");
    for key in ["a", "\ta", " a "] {
        let text = format!("[sync-options]\n\"{key}\" = {{ a = 1 }}\n");
        let file = TrainFile::parse(&text, p).unwrap();
        let e = TrainConfig::from_sources(Some((p, file)), TrainFile::default(), &SyncRegistry::builtin())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "config file fuzz.toml: [sync-options] a: must be a number, true/false or a string, got table");
    }
}

#[test]
fn sync_option_keys_and_values_with_control_characters_stay_on_one_line() {
    let p = Path::new("run.toml");
    let registry = SyncRegistry::builtin();
    for (text, escaped) in [
        ("sync = \"sma\"\n[sync-options]\n\"per\\niod\" = 3\n", "'per\\niod'"),
        ("sync = \"sma\"\n[sync-options]\nalpha-rule = \"1/\\nk\"\n", "1/\\nk"),
    ] {
        let file = TrainFile::parse(text, p).unwrap();
        let e = TrainConfig::from_sources(Some((p, file.clone())), TrainFile::default(), &registry)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("config file run.toml: [sync-options] ") && !e.contains('\n'), "{e}");
        assert!(e.contains(escaped), "{e}");
        // The same options as flags.
        let e = TrainConfig::from_sources(None, file, &registry).unwrap_err().to_string();
        assert!(!e.contains('\n') && !e.contains("config file"), "{e}");
    }
}

#[test]
fn toml_errors_are_one_line_with_the_line_and_key() {
    let p = Path::new("run.toml");
    let e = TrainFile::parse("model = \"lenet5\"\nbatch-size = \"x\"\n", p).unwrap_err().to_string();
    assert_eq!(e, "config file run.toml: line 2, key batch-size: invalid type: string \"x\", expected usize");
    let e = TrainFile::parse("lr = = 3\n", p).unwrap_err().to_string();
    assert!(e.starts_with("config file run.toml: line 1, key lr: ") && !e.contains('\n'), "{e}");
    let e = TrainFile::parse("[oops\n", p).unwrap_err().to_string();
    assert!(e.starts_with("config file run.toml: line 1, '[oops': ") && !e.contains('\n'), "{e}");
}

#[test]
fn the_resolved_config_prints_values_as_the_flags_take_them() {
    let f = TrainFile {
        learners_per_device: Some("4".into()),
        schedule: Some("multistep:80,120".into()),
        devices: Some("cpu".into()),
        ..TrainFile::default()
    };
    let c = TrainConfig::from_file(f).unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["learners-per-device"], serde_json::json!(4));
    assert_eq!(v["schedule"], "multistep:80,120:0.1");
    assert_eq!(v["devices"], "cpu:1");
    assert_eq!(v["sync"], "ssgd");
    assert_eq!(v["bn-eval"], "recalibrate:20");
    // Each printed value is accepted back by its key: the printed config is a config file.
    let back: TrainFile = serde_json::from_value(v.clone()).unwrap();
    let c2 = TrainConfig::from_file(back).unwrap();
    assert_eq!(
        (c2.learners_per_device, c2.schedule.clone(), c2.devices.clone()),
        (c.learners_per_device, c.schedule.clone(), c.devices.clone())
    );
    assert_eq!(serde_json::to_value(&c2).unwrap(), v);
    let auto = serde_json::to_value(TrainConfig::from_file(TrainFile::default()).unwrap()).unwrap();
    assert_eq!(auto["learners-per-device"], "auto");
}

#[test]
fn unknown_config_keys_are_errors() {
    let dir = std::env::temp_dir().join(format!("crossbow-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, "bach-size = 3\n").unwrap();
    let e = TrainFile::read(&p).unwrap_err().to_string();
    assert!(e.contains("bad.toml") && e.contains("bach-size"), "{e}");
    assert!(TrainFile::read(&dir.join("missing.toml")).unwrap_err().to_string().contains("missing.toml"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tuner_retune_is_off_under_ssgd_by_default_and_can_be_set() {
    let c = TrainConfig::from_file(TrainFile::default()).unwrap();
    assert_eq!(c.tuner_retune, TunerRetune::Auto);
    assert_eq!(c.tuner_significance, 1.5);
    // Under S-SGD the learner count is the batch: the count settled on stays.
    assert_eq!(c.tuner_retune.drop_under(&c.sync, false), 1.0);
    assert_eq!(TunerRetune::Auto.drop_under("sma", false), 0.2);
    let file: TrainFile = toml::from_str("tuner-retune = \"0.35\"\ntuner-significance = 0\n").unwrap();
    let c = TrainConfig::from_file(file).unwrap();
    assert_eq!((c.tuner_retune, c.tuner_significance), (TunerRetune::Drop(0.35), 0.0));
    assert_eq!(c.tuner_retune.drop_under("ssgd", false), 0.35);
    let off = TrainFile { tuner_retune: Some("off".into()), sync: Some("sma".into()), ..Default::default() };
    let c = TrainConfig::from_file(off).unwrap();
    assert_eq!(c.tuner_retune.drop_under(&c.sync, false), 1.0);
    for bad in ["1.5", "0", "never", "-0.2", "NaN"] {
        let f = TrainFile { tuner_retune: Some(bad.into()), ..Default::default() };
        let e = TrainConfig::from_file(f).unwrap_err().to_string();
        assert!(e.contains("--tuner-retune") && e.contains("'auto', 'off' or a fraction"), "{bad}: {e}");
    }
    let f = TrainFile { tuner_significance: Some(-1.0), ..Default::default() };
    let e = TrainConfig::from_file(f).unwrap_err().to_string();
    assert!(e.contains("--tuner-significance"), "{e}");
}

#[test]
fn a_global_batch_replaces_the_batch_size_under_ssgd_only() {
    let f = TrainFile { global_batch_size: Some(128), ..Default::default() };
    let c = TrainConfig::from_file(f).unwrap();
    assert_eq!((c.global_batch_size, c.batch_size), (Some(128), 128), "one learner alone takes the whole batch");
    // Under S-SGD with a fixed aggregate, a new count changes only the speed: auto re-tunes.
    assert_eq!(c.tuner_retune.drop_under(&c.sync, true), 0.2);
    // Written back without the derived batch size, and read back to the same settings.
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["global-batch-size"], 128);
    assert!(v.get("batch-size").is_none(), "{v}");
    let back = TrainConfig::from_file(serde_json::from_value(v).unwrap()).unwrap();
    assert_eq!((back.global_batch_size, back.batch_size), (Some(128), 128));
    let both = TrainFile { global_batch_size: Some(128), batch_size: Some(32), ..Default::default() };
    let e = TrainConfig::from_file(both).unwrap_err().to_string();
    assert!(e.contains("--global-batch-size 128 and --batch-size 32 are both set"), "{e}");
    let sma = TrainFile { global_batch_size: Some(128), sync: Some("sma".into()), ..Default::default() };
    let e = TrainConfig::from_file(sma).unwrap_err().to_string();
    assert!(e.contains("--global-batch-size 128 keeps S-SGD's aggregate batch fixed, but --sync is sma"), "{e}");
    let zero = TrainFile { global_batch_size: Some(0), ..Default::default() };
    assert!(TrainConfig::from_file(zero).unwrap_err().to_string().contains("--global-batch-size"));
}
