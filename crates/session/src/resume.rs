//! Settings across a checkpoint: the run's full settings are saved as a [`TrainFile`] (every
//! key set, so later changes of defaults cannot change a resumed run), and on `--resume` the
//! flags given may override only what does not change the trajectory's definition.

use serde_json::Value;

use crate::config::{TrainConfig, TrainFile};
use crate::error::SessionError;
use crate::settings::{Resume, SETTINGS, SettingInfo};

/// Whether a resumed run may change setting `key` (the table of [`crate::settings`] says).
fn changeable(key: &str) -> bool {
    SettingInfo::of(key).is_some_and(|s| s.resume == Resume::Changeable)
}

/// The keys a resumed run may change.
fn changeable_keys() -> Vec<&'static str> {
    SETTINGS.iter().filter(|s| s.resume == Resume::Changeable).map(|s| s.key).collect()
}

/// Every setting of `cfg` as a config file would write it (`crossbow train --config` reads
/// it back to the same settings), without the checkpoint settings, which a checkpoint saves
/// as policies of their own (a resumed run writes where it was resumed from, not where the
/// saved run wrote).
pub fn config_to_file(cfg: &TrainConfig) -> TrainFile {
    TrainFile {
        checkpoint_dir: None,
        checkpoint_every: None,
        keep_checkpoints: None,
        checkpoint_errors: None,
        on_divergence: None,
        max_rollbacks: None,
        share_checkpoint_dir: None,
        mpi_timeout: None,
        ..cfg.to_file()
    }
}

/// The saved settings with the `given` ones (flags and `--config`) on top; a given value
/// that would change what the run computes (model, data, optimiser, seed, synchroniser)
/// is refused, naming the flag and both values.
pub fn merge(saved: TrainFile, given: TrainFile) -> Result<TrainFile, SessionError> {
    let s = serde_json::to_value(&saved).map_err(SessionError::run)?;
    let g = serde_json::to_value(&given).map_err(SessionError::run)?;
    if let (Value::Object(s), Value::Object(g)) = (&s, &g) {
        for (k, v) in g {
            if v.is_null() || changeable(k) {
                continue;
            }
            // The synchroniser's options, option by option: giving one at its saved value is
            // no change.
            if let (Value::Object(given), "sync-options") = (v, k.as_str()) {
                let saved = s.get(k).and_then(Value::as_object);
                for (opt, value) in given {
                    let old = saved.and_then(|m| m.get(opt));
                    let text = |v: &Value| v.as_str().map(String::from).unwrap_or_else(|| v.to_string());
                    if old.map(text) != Some(text(value)) {
                        return Err(SessionError::usage(format!(
                            "the synchroniser's option {opt} cannot change when resuming: the checkpoint's run has {}, given {}; start a new run for another value",
                            old.map(text).unwrap_or_else(|| "none".into()),
                            text(value)
                        )));
                    }
                }
                continue;
            }
            let old = s.get(k).cloned().unwrap_or(Value::Null);
            if &old != v {
                return Err(SessionError::usage(format!(
                    "--{k} cannot change when resuming: the checkpoint's run has {}, given {v}; a resume may change \
                     only what does not redefine the run (limits such as --epochs, devices, logging, checkpoints, \
                     a lower --lr): start a new run for anything else",
                    if old.is_null() { "none".to_string() } else { old.to_string() },
                )));
            }
        }
    }
    // A lower rate continues a run that diverged; a higher one would be another run, and
    // continuing its line would rotate the good checkpoints away.
    if let (Some(old), Some(new)) = (saved.lr, given.lr)
        && new > old
    {
        return Err(SessionError::usage(format!(
            "--lr {new} is higher than the run's {old}: a resumed run may only lower the learning rate (to continue \
             a run that diverged); start a new run for a higher one"
        )));
    }
    Ok(saved.overridden_by(given))
}

/// The `--normalize` of a checkpoint written before the setting existed: such runs were
/// normalised with their training set's statistics, which the checkpoint saved
/// (`normalize: {mean, std}`); continuing with exactly those keeps the run's trajectory,
/// whatever the default is now. `None` where the checkpoint saved none.
pub fn saved_normalize(state: &Value) -> Option<String> {
    let n = state.get("normalize")?;
    let read = |k: &str| serde_json::from_value::<Vec<f32>>(n.get(k)?.clone()).ok();
    let (mean, std) = (read("mean")?, read("std")?);
    let choice = crossbow_data::NormalizeChoice::Given { mean, std };
    // Only what reads back as a valid setting (the resume then checks it as any other).
    choice.to_string().parse::<crossbow_data::NormalizeChoice>().ok().map(|_| choice.to_string())
}

/// The settings a resume changed (those it may change), as `--KEY NEW (the run had OLD)`,
/// so that nothing changes without a line saying so. The learning rate is left out: the
/// engine says more about it.
pub fn changes(saved: &TrainFile, now: &TrainFile) -> Vec<String> {
    let (Ok(Value::Object(s)), Ok(Value::Object(n))) = (serde_json::to_value(saved), serde_json::to_value(now)) else {
        return vec![];
    };
    let show = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "none".to_string(),
        Some(Value::String(t)) => t.clone(),
        Some(v) => v.to_string(),
    };
    changeable_keys()
        .into_iter()
        .filter(|k| *k != "lr")
        .filter(|k| s.get(*k).unwrap_or(&Value::Null) != n.get(*k).unwrap_or(&Value::Null))
        .map(|k| format!("--{k} {} (the run had {})", show(n.get(k)), show(s.get(k))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_written_out_reads_back_to_the_same_settings() {
        let f = TrainFile {
            model: Some("resnet20".into()),
            dataset: Some("synthetic-shapes".into()),
            lr: Some(0.05),
            schedule: Some("multistep:2,3:0.1".into()),
            learners_per_device: Some("3".into()),
            bn_eval: Some("recalibrate:5".into()),
            target_accuracy: Some(0.8),
            ..TrainFile::default()
        };
        let cfg = TrainConfig::from_file(f).unwrap();
        let again = TrainConfig::from_file(config_to_file(&cfg)).unwrap();
        assert_eq!(serde_json::to_value(&cfg).unwrap(), serde_json::to_value(&again).unwrap());
        // Through TOML text too.
        let text = toml::to_string(&config_to_file(&cfg)).unwrap();
        let back: TrainFile = toml::from_str(&text).unwrap();
        assert_eq!(back, config_to_file(&cfg));
    }

    #[test]
    fn a_checkpoint_from_before_normalize_continues_with_the_statistics_it_saved() {
        let state = serde_json::json!({ "normalize": { "mean": [0.4914_f32, 0.48], "std": [0.247_f32, 0.2435] } });
        let text = saved_normalize(&state).unwrap();
        assert_eq!(text, "0.4914,0.48/0.247,0.2435");
        let back: crossbow_data::NormalizeChoice = text.parse().unwrap();
        assert_eq!(
            back,
            crossbow_data::NormalizeChoice::Given { mean: vec![0.4914, 0.48], std: vec![0.247, 0.2435] },
            "read back to the same f32 values"
        );
        assert_eq!(saved_normalize(&serde_json::json!({})), None);
        assert_eq!(saved_normalize(&serde_json::json!({ "normalize": { "mean": [0.5], "std": [0.0] } })), None);
    }

    #[test]
    fn resuming_may_change_limits_but_not_the_run() {
        let saved = config_to_file(&TrainConfig::from_file(TrainFile::default()).unwrap());
        let given = TrainFile { epochs: Some(9.0), devices: Some("cpu:1".into()), ..TrainFile::default() };
        let m = merge(saved.clone(), given).unwrap();
        assert_eq!(m.epochs, Some(9.0));
        // The same value as saved is not a change.
        assert!(merge(saved.clone(), TrainFile { lr: saved.lr, ..TrainFile::default() }).is_ok());
        let e =
            merge(saved.clone(), TrainFile { momentum: Some(0.5), ..TrainFile::default() }).unwrap_err().to_string();
        assert!(e.contains("--momentum cannot change when resuming") && e.contains("0.5") && e.contains("0.9"), "{e}");
        let now = TrainFile { threads: Some(2), epochs: Some(9.0), ..saved.clone() };
        let c = changes(&saved, &now);
        assert!(c.iter().any(|l| l == "--threads 2 (the run had none)"), "{c:?}");
        assert!(c.iter().any(|l| l.starts_with("--epochs 9")), "{c:?}");
        assert!(changes(&saved, &saved).is_empty());
        // The learning rate may go down (a diverged run continued with a lower rate), not up.
        assert_eq!(
            merge(saved.clone(), TrainFile { lr: Some(0.005), ..TrainFile::default() }).unwrap().lr,
            Some(0.005)
        );
        let e = merge(saved.clone(), TrainFile { lr: Some(0.02), ..TrainFile::default() }).unwrap_err().to_string();
        assert!(e.contains("--lr 0.02 is higher than the run's 0.01"), "{e}");
        // The refusal names what may change in a few words, not every key.
        assert!(!e.contains("keep-checkpoints"), "{e}");
        let e =
            merge(saved, TrainFile { model: Some("resnet20".into()), ..TrainFile::default() }).unwrap_err().to_string();
        assert!(e.contains("--model") && e.contains("lenet5"), "{e}");
    }

    #[test]
    fn a_synchroniser_option_given_at_its_saved_value_is_no_change() {
        let opts = |pairs: &[(&str, &str)]| {
            Some(pairs.iter().map(|(k, v)| (k.to_string(), toml::Value::String(v.to_string()))).collect())
        };
        let saved =
            TrainFile { sync_options: opts(&[("alpha", "0.3"), ("central-momentum", "0.5")]), ..TrainFile::default() };
        let same = TrainFile { sync_options: opts(&[("alpha", "0.3")]), ..TrainFile::default() };
        assert!(merge(saved.clone(), same).is_ok());
        let other = TrainFile { sync_options: opts(&[("alpha", "0.2")]), ..TrainFile::default() };
        let e = merge(saved.clone(), other).unwrap_err().to_string();
        assert!(e.contains("option alpha cannot change") && e.contains("has 0.3, given 0.2"), "{e}");
        let new = TrainFile { sync_options: opts(&[("sma-form", "paper")]), ..TrainFile::default() };
        let e = merge(saved, new).unwrap_err().to_string();
        assert!(e.contains("has none, given paper"), "{e}");
    }
}
