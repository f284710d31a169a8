//! `crossbow explore`: several configurations of one training job run as branches of one
//! job (a meta-dataflow), fed from one data pipeline, compared at rungs of their budget
//! (successive halving) and/or against a target accuracy; the losers stop early and the best
//! configuration is written as a config file `crossbow train --config` accepts.
//!
//! The file is a `crossbow train` config (the base) plus two tables:
//!
//! ```toml
//! model = "lenet5"
//! epochs = 2
//! learners-per-device = 1
//!
//! [space]                       # the cartesian product of these is explored
//! lr = [0.01, 0.05, 0.1]
//! momentum = { min = 0.5, max = 0.9, steps = 3 }              # linear
//! weight-decay = { min = 1e-5, max = 1e-3, steps = 3, scale = "log" }
//! batch-size = [16, 32]
//! sync = ["sma", "ssgd"]
//! learners-per-device = [1, 2, "auto"]
//!
//! [select]
//! eta = 2        # successive halving: keep the best 1/eta at each rung
//! top-k = 1      # halving stops at this many
//! target = 0.98  # stop at the first configuration that reaches this test accuracy
//! ```
//!
//! Every configuration is a group of learners with its own engine (its own central model).
//! All groups take their batches from ONE pipeline of unit batches of `g` images, `g` the
//! greatest common divisor of the batch sizes: a learner's batch of `b` images is `b / g`
//! consecutive units, so each sample is read, decoded and augmented once, and every group
//! sees the same augmented samples in the same order. With one batch size (`g = b`) the
//! units are exactly the batches `crossbow train` draws, so one configuration explored is
//! `crossbow train` with its settings, bit for bit (same evaluations). An epoch is one pass of
//! the unit stream (`floor(n / g) * g` samples) for every group.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use crossbow_replica::engine::CpuDevices;
use serde_json::json;

use crate::config::{TrainConfig, TrainFile};
use crate::dispatch::{Hardware, resolve_hardware};
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::Reporter;
use crossbow_session::{Branch, load_data};

mod groups;
mod report;
mod state;

use groups::{Ctx, Outcome, run_groups};
use report::finish;

/// Most configurations one exploration runs (each is an engine held in memory at once).
pub const MAX_CONFIGS: usize = 64;

/// The keys a `[space]` may vary: the settings the table of [`crate::settings`] marks
/// explorable, and the option flags of `registry`'s synchronisers (`alpha`).
pub fn space_keys(registry: &SyncRegistry) -> Vec<String> {
    let settings = crate::settings::SETTINGS.iter().filter(|s| s.explore == crate::settings::Explore::Yes);
    settings.map(|s| s.key.to_string()).chain(registry.option_flags().into_iter().map(|(f, _)| f)).collect()
}

/// Explorable keys whose values may be real numbers (the only ones a `{ min, max, steps }`
/// range may give): numeric settings and synchroniser options (their factory checks them).
fn real_keys(registry: &SyncRegistry) -> Vec<String> {
    let settings = crate::settings::SETTINGS.iter().filter(|s| s.explore == crate::settings::Explore::Yes && s.number);
    settings.map(|s| s.key.to_string()).chain(registry.option_flags().into_iter().map(|(f, _)| f)).collect()
}

/// `crossbow explore`'s flags.
#[derive(Args, Debug)]
pub struct ExploreArgs {
    /// The TOML file: a `crossbow train` config plus `[space]` and `[select]` (docs/explore.md)
    #[arg(long)]
    pub config: PathBuf,
    /// Folder for best.toml, accuracy.svg and ranking.txt
    #[arg(long, default_value = "explore-out")]
    pub out: PathBuf,
    /// Write one JSON object per evaluation, rung, growth and the end to this file
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Run the configurations one after another instead, each with its own pipeline, to the
    /// full budget without pruning (what exploring saves is measured against this)
    #[arg(long)]
    pub sequential: bool,
    /// Print the configurations and exit
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the final ranking
    #[arg(long, short)]
    pub quiet: bool,
    /// Continue the exploration a signal stopped (its state is in OUT/state), with the same
    /// --config
    #[arg(long)]
    pub resume: bool,
}

/// How the configurations are compared: `[select]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    /// Successive-halving factor (keep the best `ceil(live / eta)` at each rung), if halving.
    pub eta: Option<usize>,
    /// Number of rungs (the last at the full budget); default: enough to halve down to `top_k`.
    pub rungs: Option<usize>,
    /// How many configurations halving keeps at the end.
    pub top_k: usize,
    /// Stop at the first configuration whose test accuracy reaches this, 0..1.
    pub target: Option<f64>,
    /// Give the learners of pruned configurations to the survivors (fixed learner counts only).
    pub grow: bool,
}

/// One configuration: its settings from the space and the validated training config.
#[derive(Clone, Debug)]
pub struct Configuration {
    /// Its number, from 0, in the order of the cartesian product.
    pub id: usize,
    /// `(key, value)` of every `[space]` key, keys in alphabetical order.
    pub settings: Vec<(String, String)>,
    /// The validated settings it trains with.
    pub cfg: TrainConfig,
}

impl Configuration {
    /// `lr=0.05 batch-size=32`.
    pub fn label(&self) -> String {
        self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }
}

/// A read and validated exploration file.
#[derive(Debug)]
pub struct Exploration {
    /// The file it was read from.
    pub path: PathBuf,
    /// The configurations, validated.
    pub configs: Vec<Configuration>,
    /// The selection rule.
    pub select: Select,
}

fn bad(path: &Path, what: String) -> SessionError {
    SessionError::usage(format!("config file {}: {what}", path.display()))
}

fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

fn as_real(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Float(x) => Some(*x),
        toml::Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

/// Puts `key = v` of the space into `f`: any setting the table of [`crate::settings`] marks
/// explorable, or a synchroniser option by its flag; errors say what type the key takes.
fn apply(f: &mut TrainFile, key: &str, v: &toml::Value, registry: &SyncRegistry) -> Result<(), String> {
    if let Some(option) = registry.flag_option(key) {
        f.sync_options.get_or_insert_with(Default::default).insert(option, v.clone());
        return Ok(());
    }
    match crate::settings::SettingInfo::of(key) {
        Some(s) if s.explore == crate::settings::Explore::Yes => f.set_toml(key, v),
        Some(_) => Err("not a setting an exploration may vary".into()),
        None => Err("unknown key".into()),
    }
}

/// The values of one `[space]` key: a non-empty list, or a range table.
fn values_of(
    path: &Path,
    key: &str,
    v: &toml::Value,
    registry: &SyncRegistry,
) -> Result<Vec<toml::Value>, SessionError> {
    let at = |what: String| bad(path, format!("[space] {key}: {what}"));
    let values = match v {
        toml::Value::Array(list) if list.is_empty() => {
            return Err(at("the list is empty; give at least one value".into()));
        }
        toml::Value::Array(list) => list.clone(),
        toml::Value::Table(t) => {
            let reals = real_keys(registry);
            if !reals.iter().any(|k| k == key) {
                return Err(at(format!("a range is only for {}; give a list", reals.join(", "))));
            }
            for k in t.keys() {
                if !["min", "max", "steps", "scale"].contains(&k.as_str()) {
                    return Err(at(format!("unknown range key '{k}' (a range has min, max, steps and scale)")));
                }
            }
            let num = |k: &str| -> Result<f64, SessionError> {
                let x = t.get(k).ok_or_else(|| at(format!("the range needs '{k}'")))?;
                as_real(x)
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| at(format!("{k} = {}: not a finite number", show(x))))
            };
            let (min, max) = (num("min")?, num("max")?);
            if min > max {
                return Err(at(format!("inverted range: min = {min} is above max = {max}")));
            }
            let steps = match t.get("steps") {
                Some(toml::Value::Integer(s)) if *s >= 1 && *s <= MAX_CONFIGS as i64 => *s as usize,
                Some(s) => {
                    return Err(at(format!("steps = {}: must be a whole number from 1 to {MAX_CONFIGS}", show(s))));
                }
                None => return Err(at("the range needs 'steps'".into())),
            };
            let log = match t.get("scale") {
                None => false,
                Some(toml::Value::String(s)) if s == "linear" => false,
                Some(toml::Value::String(s)) if s == "log" => true,
                Some(s) => return Err(at(format!("scale = {}: must be \"linear\" or \"log\"", show(s)))),
            };
            if log && min <= 0.0 {
                return Err(at(format!("a log range needs min > 0, got min = {min}")));
            }
            if steps > 1 && min == max {
                return Err(at(format!("min = max = {min} with steps = {steps} gives the same value {steps} times")));
            }
            (0..steps)
                .map(|i| {
                    let t = if steps == 1 { 0.0 } else { i as f64 / (steps - 1) as f64 };
                    let x = if log { (min.ln() + t * (max.ln() - min.ln())).exp() } else { min + t * (max - min) };
                    // Print-friendly: 12 significant digits (0.1 stays 0.1, not 0.10000000000000002).
                    let x = format!("{x:.12e}").parse::<f64>().unwrap_or(x);
                    toml::Value::Float(if i + 1 == steps { max } else { x })
                })
                .collect()
        }
        other => return Err(at(format!("{}: give a list of values or a range {{ min, max, steps }}", show(other)))),
    };
    for (i, a) in values.iter().enumerate() {
        if values[..i].contains(a) {
            return Err(at(format!("the value {} appears twice", show(a))));
        }
    }
    Ok(values)
}

fn parse_select(path: &Path, v: Option<&toml::Value>) -> Result<Select, SessionError> {
    let mut s = Select { eta: None, rungs: None, top_k: 1, target: None, grow: false };
    let Some(v) = v else { return Ok(s) };
    let t = v.as_table().ok_or_else(|| bad(path, "[select] must be a table".into()))?;
    let at = |k: &str, what: String| bad(path, format!("[select] {k}: {what}"));
    let count = |k: &str, x: &toml::Value, least: i64| match x {
        toml::Value::Integer(i) if *i >= least => Ok(*i as usize),
        _ => Err(at(k, format!("{} must be a whole number >= {least}", show(x)))),
    };
    for (k, x) in t {
        match k.as_str() {
            "eta" => s.eta = Some(count(k, x, 2)?),
            "rungs" => s.rungs = Some(count(k, x, 1)?),
            "top-k" => s.top_k = count(k, x, 1)?,
            "grow" => s.grow = x.as_bool().ok_or_else(|| at(k, format!("{} must be true or false", show(x))))?,
            "target" => {
                let a = as_real(x).ok_or_else(|| at(k, format!("{} is not a number", show(x))))?;
                s.target = Some(match a {
                    a if a > 0.0 && a <= 1.0 => a,
                    a if a > 1.0 && a <= 100.0 => a / 100.0,
                    _ => return Err(at(k, format!("{a} must be in (0, 1] or a percentage"))),
                });
            }
            _ => {
                return Err(at(k, "unknown key (the keys are eta, rungs, top-k, target and grow)".into()));
            }
        }
    }
    if s.rungs.is_some() && s.eta.is_none() {
        return Err(at("rungs", "rungs needs eta (the halving factor)".into()));
    }
    Ok(s)
}

/// Reads an exploration file: the base settings, the space and the selection rule, every
/// configuration validated as `crossbow train` would (nothing runs before all are good).
pub fn read(path: &Path, registry: &SyncRegistry) -> Result<Exploration, SessionError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
    // The TOML syntax (and the line of an error) as `crossbow train --config` reports it.
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
        let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        let line =
            e.span().map(|s| text.as_bytes()[..s.start.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1);
        bad(path, format!("{}{msg}", line.map(|l| format!("line {l}: ")).unwrap_or_default()))
    })?;
    let space = table.remove("space").ok_or_else(|| bad(path, "no [space] table: nothing to explore".into()))?;
    let select = parse_select(path, table.remove("select").as_ref())?;
    registry.lift_option_keys(&mut table, false).map_err(|e| bad(path, e))?;
    let base: TrainFile = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| bad(path, e.message().split_whitespace().collect::<Vec<_>>().join(" ")))?;
    if let Some(t) = base.target_accuracy {
        return Err(bad(path, format!("target-accuracy = {t}: in an exploration the target is [select] target")));
    }
    if base.metrics.is_some() {
        return Err(bad(path, "metrics: in an exploration the metrics file is --metrics".into()));
    }
    // The base alone must be a good config (its errors name the file and the key).
    TrainConfig::from_sources(Some((path, base.clone())), TrainFile::default(), registry)?;
    let space = space.as_table().ok_or_else(|| bad(path, "[space] must be a table of lists or ranges".into()))?;
    if space.is_empty() {
        return Err(bad(path, "[space] is empty: nothing to explore".into()));
    }
    let mut dims: Vec<(String, Vec<toml::Value>)> = vec![];
    for (key, v) in space {
        let keys = space_keys(registry);
        if !keys.contains(key) {
            return Err(bad(path, format!("[space] {key}: unknown key (the keys are {})", keys.join(", "))));
        }
        let values = values_of(path, key, v, registry)?;
        for x in &values {
            apply(&mut TrainFile::default(), key, x, registry).map_err(|e| bad(path, format!("[space] {key}: {e}")))?;
        }
        dims.push((key.clone(), values));
    }
    let total = dims.iter().try_fold(1usize, |n, (_, v)| n.checked_mul(v.len())).unwrap_or(usize::MAX);
    if total > MAX_CONFIGS {
        let sizes = dims.iter().map(|(k, v)| format!("{k} {}", v.len())).collect::<Vec<_>>().join(" x ");
        return Err(bad(
            path,
            format!("[space] gives {total} configurations ({sizes}); at most {MAX_CONFIGS} run together"),
        ));
    }
    let mut configs = vec![];
    for id in 0..total {
        let mut rest = id;
        let mut file = TrainFile::default();
        let mut picked = vec![];
        for (key, values) in dims.iter().rev() {
            let v = &values[rest % values.len()];
            rest /= values.len();
            apply(&mut file, key, v, registry).map_err(|e| bad(path, format!("[space] {key}: {e}")))?;
            picked.push((key.clone(), v.clone()));
        }
        picked.reverse();
        let cfg =
            TrainConfig::from_sources(Some((path, base.clone().overridden_by(file))), TrainFile::default(), registry)
                .map_err(|e| blame(path, &base, &picked, e, registry))?;
        let settings = picked
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                )
            })
            .collect();
        configs.push(Configuration { id, settings, cfg });
    }
    Ok(Exploration { path: path.to_path_buf(), configs, select })
}

/// The error of a configuration, naming the `[space]` key and value that make it bad (or all
/// of its settings, when only their combination is bad).
fn blame(
    path: &Path,
    base: &TrainFile,
    picked: &[(String, toml::Value)],
    e: SessionError,
    reg: &SyncRegistry,
) -> SessionError {
    let prefix = format!("config file {}: ", path.display());
    let strip =
        |e: SessionError| e.to_string().strip_prefix(&prefix).map(String::from).unwrap_or_else(|| e.to_string());
    for (key, v) in picked {
        let mut one = TrainFile::default();
        if apply(&mut one, key, v, reg).is_err() {
            continue;
        }
        if let Err(e) =
            TrainConfig::from_sources(Some((path, base.clone().overridden_by(one))), TrainFile::default(), reg)
        {
            return bad(path, format!("[space] {key} = {}: {}", show(v), strip(e)));
        }
    }
    let all = picked.iter().map(|(k, v)| format!("{k} = {}", show(v))).collect::<Vec<_>>().join(", ");
    bad(path, format!("[space] the configuration {all}: {}", strip(e)))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The budget fractions of the rungs (the last is 1) for `n` configurations.
pub fn rung_fractions(select: &Select, n: usize) -> Vec<f64> {
    let Some(eta) = select.eta else { return vec![1.0] };
    let rungs = select.rungs.unwrap_or_else(|| {
        let (mut live, mut r) = (n, 1);
        while live > select.top_k {
            live = live.div_ceil(eta).max(select.top_k);
            r += 1;
        }
        r
    });
    (0..rungs).map(|r| 1.0 / (eta as f64).powi((rungs - 1 - r) as i32)).collect()
}

/// `crossbow explore`.
pub fn run(args: &ExploreArgs, registry: &SyncRegistry) -> Result<(), SessionError> {
    crate::processes::one_process_only("explore")?;
    let ex = read(&args.config, registry)?;
    let n = ex.configs.len();
    let fractions = if args.sequential { vec![1.0] } else { rung_fractions(&ex.select, n) };
    let first = &ex.configs[0].cfg;
    println!(
        "{n} configuration{} of {} on {} ({} epochs each); {}",
        if n == 1 { "" } else { "s" },
        first.model,
        first.dataset,
        first.epochs,
        if args.sequential {
            "one after another, each to the full budget".to_string()
        } else {
            describe_select(&ex.select, &fractions)
        }
    );
    for c in &ex.configs {
        println!("  #{:<3} {}", c.id, c.label());
    }
    if args.dry_run {
        return Ok(());
    }
    let data = load_data(first)?;
    for c in &ex.configs {
        if c.cfg.batch_size > data.train.len() {
            return Err(bad(
                &ex.path,
                format!(
                    "batch-size {} (configuration #{}) is larger than the {} train set ({} images)",
                    c.cfg.batch_size,
                    c.id,
                    first.dataset,
                    data.train.len()
                ),
            ));
        }
    }
    let mut notes = vec![];
    let cores = match resolve_hardware(&first.devices, first.threads, &mut |l| notes.push(l))? {
        Hardware::Cpu { count, threads } => CpuDevices { count, threads },
        Hardware::Cuda { .. } => {
            return Err(bad(
                &ex.path,
                format!(
                    "devices = \"{}\": crossbow explore runs on CPU devices only; set devices = \"cpu\"",
                    first.devices
                ),
            ));
        }
    };
    for c in &ex.configs {
        Branch::check(&c.cfg, &data, registry, &cores)
            .map_err(|e| bad(&ex.path, format!("configuration #{} ({}): {e}", c.id, c.label())))?;
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| SessionError::usage(format!("--out {}: cannot create: {e}", args.out.display())))?;
    let settings: Vec<Vec<(String, String)>> = ex.configs.iter().map(|c| c.settings.clone()).collect();
    let resumed = match (args.resume, args.sequential) {
        (true, true) => {
            return Err(SessionError::usage(
                "--resume continues a joint exploration; --sequential runs (a measurement) start over",
            ));
        }
        (true, false) => Some(state::load(&args.out, &settings, &fractions)?),
        (false, _) => {
            if state::dir(&args.out).join("explore.json").exists() {
                return Err(SessionError::usage(format!(
                    "--out {}: holds a stopped exploration (state/); continue it with --resume, or use another folder",
                    args.out.display()
                )));
            }
            None
        }
    };
    let run_id = resumed.as_ref().map_or_else(|| crate::checkpoint::Line::new_run().run, |s| s.run.clone());
    let owner = resumed.as_ref().map(|s| s.run.as_str());
    let reporter = Reporter::new_owned(args.metrics.as_deref(), true, first.epochs, owner)?;
    let interrupt = crate::signals::Interrupt::install()?;
    crate::signals::set_notes(
        Some(&format!(
            "crossbow explore: stopping after this step; the ranking so far, its leader and the state to --resume go to {}; a second signal exits at once",
            args.out.display()
        )),
        Some(
            "crossbow explore: exited at once on a second signal; nothing of this exploration was saved since it started (or was resumed)",
        ),
    );
    let mut ctx = Ctx {
        data: &data,
        registry,
        cores,
        reporter,
        wall: Instant::now(),
        wall_before: resumed.as_ref().map_or(0.0, |s| s.wall_secs),
        quiet: args.quiet,
        interrupt,
        out: args.out.clone(),
        run_id: run_id.clone(),
    };
    for l in notes {
        ctx.say(&l);
    }
    match &resumed {
        Some(s) => {
            ctx.say(&format!("resuming from {} after {} steps", state::dir(&args.out).display(), s.steps));
            ctx.reporter.record("resume", json!({ "run": run_id, "pid": std::process::id(), "steps": s.steps }))?;
        }
        None => ctx.reporter.record(
            "start",
            json!({
                "run": run_id, "pid": std::process::id(),
                "file": ex.path, "mode": if args.sequential { "sequential" } else { "explore" },
                "configurations": ex.configs.iter().map(|c| json!({ "id": c.id, "settings": c.settings })).collect::<Vec<_>>(),
                "rung_fractions": fractions,
            }),
        )?,
    }
    let outcome = if args.sequential {
        let mut all = Outcome {
            groups: vec![],
            decoded_samples: 0,
            wait_secs: 0.0,
            copy_secs: 0.0,
            unit: 0,
            reached: None,
            rung_fractions: vec![1.0],
            stopped: None,
        };
        for c in &ex.configs {
            let select = Select { eta: None, rungs: None, top_k: 1, target: None, grow: false };
            let o = run_groups(&mut ctx, std::slice::from_ref(c), &select, &[1.0], None)?;
            all.decoded_samples += o.decoded_samples;
            all.wait_secs += o.wait_secs;
            all.copy_secs += o.copy_secs;
            all.groups.extend(o.groups);
            if o.stopped.is_some() {
                // (A measurement is not resumed: the state it saved is dropped.)
                state::clear(&args.out);
                all.stopped = o.stopped.map(|(sig, steps, _)| (sig, steps, PathBuf::new()));
                break;
            }
        }
        all
    } else {
        run_groups(&mut ctx, &ex.configs, &ex.select, &fractions, resumed)?
    };
    finish(&mut ctx, args, outcome)
}

fn describe_select(s: &Select, fractions: &[f64]) -> String {
    let mut parts = vec![];
    if let Some(eta) = s.eta {
        let f = fractions.iter().map(|f| format!("{f:.3}")).collect::<Vec<_>>().join(", ");
        parts.push(format!("successive halving (eta {eta}, top {}) at budget fractions {f}", s.top_k));
    } else {
        parts.push("all to the full budget, ranked at the end".to_string());
    }
    if let Some(t) = s.target {
        parts.push(format!("stop at the first to reach {:.2}%", 100.0 * t));
    }
    if s.grow {
        parts.push("survivors take the pruned configurations' learners".into());
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(eta: Option<usize>, top_k: usize) -> Select {
        Select { eta, rungs: None, top_k, target: None, grow: false }
    }

    #[test]
    fn rungs_halve_down_to_top_k() {
        assert_eq!(rung_fractions(&sel(Some(2), 1), 8), vec![0.125, 0.25, 0.5, 1.0]);
        assert_eq!(rung_fractions(&sel(Some(2), 1), 4), vec![0.25, 0.5, 1.0]);
        assert_eq!(rung_fractions(&sel(Some(3), 1), 9), vec![1.0 / 9.0, 1.0 / 3.0, 1.0]);
        assert_eq!(rung_fractions(&sel(Some(2), 2), 8), vec![0.25, 0.5, 1.0]);
        assert_eq!(rung_fractions(&sel(None, 1), 8), vec![1.0]);
        let fixed = Select { rungs: Some(2), ..sel(Some(4), 1) };
        assert_eq!(rung_fractions(&fixed, 8), vec![0.25, 1.0]);
    }

    #[test]
    fn ranges_are_even_in_their_scale() {
        let p = Path::new("x.toml");
        let v: toml::Value = toml::from_str::<toml::Table>("r = { min = 0.01, max = 1.0, steps = 3, scale = \"log\" }")
            .unwrap()["r"]
            .clone();
        let xs: Vec<f64> =
            values_of(p, "lr", &v, &SyncRegistry::builtin()).unwrap().iter().map(|x| as_real(x).unwrap()).collect();
        assert_eq!(xs, vec![0.01, 0.1, 1.0]);
        let v: toml::Value =
            toml::from_str::<toml::Table>("r = { min = 0.5, max = 0.9, steps = 5 }").unwrap()["r"].clone();
        let xs: Vec<f64> = values_of(p, "momentum", &v, &SyncRegistry::builtin())
            .unwrap()
            .iter()
            .map(|x| as_real(x).unwrap())
            .collect();
        assert_eq!(xs, vec![0.5, 0.6, 0.7, 0.8, 0.9]);
    }

    #[test]
    fn gcd_of_batch_sizes() {
        assert_eq!([16, 32, 24].iter().fold(0, |a, &b| gcd(a, b)), 8);
        assert_eq!(gcd(0, 32), 32);
    }
}
