//! Fuzzing the TOML config parser and validation: random and mutated config files built from
//! the known keys (and unknown ones), with values of every TOML type, including NaN, the
//! infinities, huge and negative numbers. Whatever the text, reading it must not panic and
//! must give either a configuration or one line of error; every error about a file naming
//! only file values names the file; the same values given as flags never name a file; and a
//! configuration that validates prints (`--dry-run`) as JSON.

use std::path::Path;

use crossbow_cli::SyncRegistry;
use crossbow_cli::config::{TrainConfig, TrainFile};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

/// Every key of the file, and a few that are not.
const KEYS: &[&str] = &[
    "model",
    "dataset",
    "data-dir",
    "batch-size",
    "lr",
    "momentum",
    "weight-decay",
    "nesterov",
    "schedule",
    "epochs",
    "target-accuracy",
    "seed",
    "threads",
    "metrics",
    "devices",
    "learners-per-device",
    "sync",
    "alpha",
    "central-momentum",
    "sma-form",
    "bn-eval",
    "eval-every",
    "eval-every-iterations",
    "eval-batch-size",
    "train-size",
    "test-size",
    "workers",
    "max-learners",
    "tuner-threshold",
    "tuner-significance",
    "tuner-retune",
];

/// Keys that are not settings.
const UNKNOWN: &[&str] = &["bach-size", "", "config", "sync-options"];

/// Strings the keys take (and some they do not).
const WORDS: &[&str] = &[
    "auto",
    "cpu",
    "cpu:1",
    "cpu:0",
    "cpu:2",
    "cpu:99999",
    "cuda",
    "cuda:0,1",
    "tpu",
    "lenet5",
    "resnet20",
    "resnet21",
    "vgg16",
    "mnist",
    "cifar10",
    "synthetic-digits",
    "synthetic-shapes",
    "sma",
    "ssgd",
    "easgd",
    "independent",
    "hogwild",
    "paper",
    "local-momentum",
    "constant",
    "multistep:1,2",
    "multistep:2,1",
    "multistep:1,2:nan",
    "warmup:1:0.1:2,3:0.5",
    "cosine",
    "cosine:0",
    "cosine:10:2",
    "mean",
    "recalibrate",
    "recalibrate:0",
    "recalibrate:18446744073709551616",
    "4",
    "0",
    "-1",
    "18446744073709551615",
    "1e400",
    "NaN",
    "",
    " ",
    "/nonexistent/dir",
    "/tmp",
    "\u{1F600}",
];

/// A TOML value, as text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        (0i64..40).prop_map(|i| i.to_string()),
        prop_oneof![
            Just("nan".to_string()),
            Just("inf".to_string()),
            Just("-inf".to_string()),
            Just("1e308".to_string()),
            Just("-0.0".to_string()),
            Just("0.5".to_string()),
            Just("99.5".to_string()),
        ],
        any::<f64>().prop_map(|x| if x.is_finite() { format!("{x:?}") } else { "nan".into() }),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::sample::select(WORDS).prop_map(|w| format!("{w:?}")),
        "[a-z0-9:,. -]{0,12}".prop_map(|w| format!("{w:?}")),
        Just("[1, 2]".to_string()),
        Just("{ a = 1 }".to_string()),
        Just("1979-05-27".to_string()),
    ]
}

/// Keys whose values are whole numbers, numbers, and true/false (the others are strings;
/// `learners-per-device` is a string or a whole number).
const WHOLE: &[&str] = &[
    "batch-size",
    "seed",
    "threads",
    "eval-every-iterations",
    "eval-batch-size",
    "train-size",
    "test-size",
    "workers",
    "max-learners",
    "learners-per-device",
];
const REAL: &[&str] = &[
    "lr",
    "momentum",
    "weight-decay",
    "epochs",
    "target-accuracy",
    "alpha",
    "central-momentum",
    "eval-every",
    "tuner-threshold",
    "tuner-significance",
];

/// A value of the key's own type (with edge cases), usually: the validation is reached.
fn typed_value(key: &'static str) -> BoxedStrategy<String> {
    let whole = prop_oneof![
        6 => (0u64..40).prop_map(|i| i.to_string()),
        2 => (0..i64::MAX).prop_map(|i| i.to_string()),
        1 => Just(i64::MAX.to_string()),
        1 => Just("-1".to_string()),
    ];
    let real = prop_oneof![
        any::<f64>().prop_map(|x| if x.is_finite() { format!("{x:?}") } else { "nan".into() }),
        (-2.0f64..2.0).prop_map(|x| format!("{x:?}")),
        prop::sample::select(vec!["nan", "inf", "-inf", "0", "1", "0.0", "1e-300", "1e308", "100", "150"])
            .prop_map(String::from),
    ];
    let own: &[&str] = match key {
        "model" => &["lenet5", "resnet20", "resnet110", "resnet21", "vgg16", "resnet50"],
        "dataset" => &["synthetic-digits", "synthetic-shapes", "mnist", "cifar100", "imagenet"],
        "devices" => &["auto", "cpu", "cpu:1", "cpu:2", "cpu:0", "cpu:4096", "cuda", "cuda:7"],
        "sync" => &["sma", "ssgd", "easgd", "independent", "S-SGD", "hogwild"],
        "sma-form" => &["paper", "local-momentum", "fancy"],
        "bn-eval" => &["mean", "recalibrate", "recalibrate:3", "recalibrate:0"],
        "schedule" => &["constant", "multistep:1,2", "multistep:2,1", "warmup:1:0.1:2,3", "cosine", "cosine:0"],
        "learners-per-device" => &["auto", "1", "3", "0", "-2", "1000000000000"],
        "data-dir" | "metrics" => &["/tmp", "/nonexistent/dir", "", "."],
        _ => WORDS,
    };
    let word = prop_oneof![
        3 => prop::sample::select(own).prop_map(|w| format!("{w:?}")),
        1 => prop::sample::select(WORDS).prop_map(|w| format!("{w:?}")),
        1 => "[a-z0-9:,. -]{0,12}".prop_map(|w| format!("{w:?}")),
    ];
    if key == "nesterov" {
        any::<bool>().prop_map(|b| b.to_string()).boxed()
    } else if key == "learners-per-device" {
        prop_oneof![whole, word].boxed()
    } else if WHOLE.contains(&key) {
        whole.boxed()
    } else if REAL.contains(&key) {
        real.boxed()
    } else {
        word.boxed()
    }
}

/// The value of a `key = value` line: mostly of the key's type, sometimes anything.
fn value_for(key: &'static str) -> BoxedStrategy<(String, String)> {
    prop_oneof![19 => typed_value(key), 1 => value()].prop_map(move |v| (key.to_string(), v)).boxed()
}

/// Lines for distinct known keys (TOML refuses duplicates, so those are rare: mutations),
/// sometimes one with a key that is not a setting.
fn lines() -> impl Strategy<Value = Vec<(String, String)>> {
    let known = prop::sample::subsequence(KEYS, 0..9)
        .prop_shuffle()
        .prop_flat_map(|keys| keys.into_iter().map(value_for).collect::<Vec<_>>());
    let unknown = prop_oneof![
        9 => Just(vec![]),
        1 => (prop::sample::select(UNKNOWN).prop_map(String::from), value()).prop_map(|l| vec![l]),
    ];
    (known, unknown).prop_map(|(mut k, u)| {
        k.extend(u);
        k
    })
}

/// A config file: key = value lines, maybe a `[sync-options]` table, maybe mutated.
fn file_text() -> impl Strategy<Value = String> {
    let lines = lines();
    let options = prop_oneof![
        3 => Just(vec![]),
        1 => prop::collection::vec(("[a-z]{0,6}", value()), 1..3),
    ];
    let mutation = prop_oneof![
        8 => Just(None),
        1 => (any::<prop::sample::Index>(), any::<char>()).prop_map(|(i, c)| Some((i, Some(c)))),
        1 => any::<prop::sample::Index>().prop_map(|i| Some((i, None))),
    ];
    (lines, options, mutation).prop_map(|(lines, options, mutation)| {
        let mut text: String = lines.iter().map(|(k, v)| format!("{k:?} = {v}\n")).collect();
        if !options.is_empty() {
            text.push_str("[sync-options]\n");
            for (k, v) in &options {
                text.push_str(&format!("{k:?} = {v}\n"));
            }
        }
        if let Some((at, c)) = mutation {
            let chars: Vec<char> = text.chars().collect();
            let i = if chars.is_empty() { 0 } else { at.index(chars.len()) };
            let mut chars = chars;
            match c {
                Some(c) => chars.insert(i.min(chars.len()), c),
                None if !chars.is_empty() => {
                    chars.remove(i);
                }
                None => {}
            }
            text = chars.into_iter().collect();
        }
        text
    })
}

fn one_line(e: &str) -> bool {
    !e.trim().is_empty() && !e.contains('\n')
}

proptest! {
    #![proptest_config(Config {
        cases: 10_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    })]

    #[test]
    fn any_config_text_is_a_config_or_one_line_of_error(text in file_text()) {
        let path = Path::new("fuzz.toml");
        let registry = SyncRegistry::builtin();
        match TrainFile::parse(&text, path) {
            Err(e) => {
                let e = e.to_string();
                prop_assert!(one_line(&e) && e.starts_with("config file fuzz.toml: "), "{text:?}: {e}");
            }
            Ok(file) => {
                // As a config file: errors name the file.
                match TrainConfig::from_sources(Some((path, file.clone())), TrainFile::default(), &registry) {
                    Ok(cfg) => {
                        let json = serde_json::to_string_pretty(&cfg);
                        prop_assert!(json.is_ok(), "{text:?}");
                    }
                    Err(e) => {
                        let e = e.to_string();
                        prop_assert!(one_line(&e) && e.contains("config file fuzz.toml"), "{text:?}: {e}");
                    }
                }
                // The same values as flags: errors never name a file.
                match TrainConfig::from_sources(None, file, &registry) {
                    Ok(_) => {}
                    Err(e) => {
                        let e = e.to_string();
                        prop_assert!(one_line(&e) && !e.contains("config file"), "{text:?}: {e}");
                    }
                }
            }
        }
    }
}

/// The generator is worth its cases: a fair share of them parse and validate, parse and fail
/// validation, and fail to parse (a generator whose every file failed to parse would test
/// the TOML crate only).
#[test]
fn the_generator_reaches_every_outcome() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (path, registry) = (Path::new("f.toml"), SyncRegistry::builtin());
    let mut counts = [0usize; 3];
    for _ in 0..2000 {
        let Ok(tree) = file_text().new_tree(&mut runner) else { continue };
        let outcome = match TrainFile::parse(&tree.current(), path) {
            Err(_) => 0,
            Ok(f) => match TrainConfig::from_sources(Some((path, f)), TrainFile::default(), &registry) {
                Ok(_) => 1,
                Err(_) => 2,
            },
        };
        counts[outcome] += 1;
    }
    assert!(counts.iter().all(|&c| c >= 200), "parse errors, valid, invalid: {counts:?}");
}
