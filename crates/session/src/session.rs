//! [`Session`]: one training run, built from settings, run to its end.

use std::path::{Path, PathBuf};

use crate::checkpoint::{self, CheckpointArgs, CheckpointPolicy, DivergencePolicy};
use crate::config::{TrainConfig, TrainFile};
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::{Reporter, Summary};
use crate::signals::Interrupt;
use crate::trainer::Trainer;
use crate::{paths, resume, train};

/// One training run: settings in, a [`Summary`] out (see the crate documentation).
///
/// The settings are those of `crossbow train` ([`TrainFile`]: every flag and config-file
/// key); [`Session::from_sources`] takes a config file and flags as the command line does
/// (errors then name the file and key, or the flag). [`Session::resume`] continues a
/// checkpointed run; [`Session::on_progress`] receives every line the run would print.
pub struct Session {
    file: Option<(PathBuf, TrainFile)>,
    settings: TrainFile,
    registry: SyncRegistry,
    resume: Option<PathBuf>,
    quiet: bool,
    progress: Option<crate::report::ProgressSink>,
    signals: bool,
    data: Option<train::Data>,
}

impl Session {
    /// A run with `settings` (unset ones take their defaults) and the built-in
    /// synchronisers. Nothing is checked or loaded until [`Session::run`].
    pub fn new(settings: TrainFile) -> Result<Self, SessionError> {
        Ok(Session::from_settings(settings))
    }

    pub(crate) fn from_settings(settings: TrainFile) -> Self {
        Session {
            file: None,
            settings,
            registry: SyncRegistry::builtin(),
            resume: None,
            quiet: false,
            progress: None,
            signals: false,
            data: None,
        }
    }

    /// These settings instead of the ones given so far.
    pub(crate) fn with_settings(mut self, settings: TrainFile) -> Self {
        self.settings = settings;
        self
    }

    /// A run with the settings of a config file (if any) overridden by `flags`; errors about
    /// a value of the file name the file and its key.
    pub fn from_sources(file: Option<(PathBuf, TrainFile)>, flags: TrainFile) -> Result<Self, SessionError> {
        let mut s = Session::new(flags)?;
        s.file = file;
        Ok(s)
    }

    /// Trains on these datasets instead of loading them from the settings (`dataset`,
    /// `data-dir`, ...): datasets of your own, or one load shared by many runs. The settings
    /// still say how they are trained on (augmentation, normalisation).
    pub fn data(mut self, data: train::Data) -> Self {
        self.data = Some(data);
        self
    }

    /// The synchronisers `--sync` may name (yours among them: [`SyncRegistry::register`]).
    pub fn registry(mut self, registry: SyncRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Continue the run saved in this checkpoint file, or in the newest good checkpoint of
    /// this folder (the settings given override the saved ones where a resume may change
    /// them).
    pub fn resume(mut self, from: impl Into<PathBuf>) -> Self {
        self.resume = Some(from.into());
        self
    }

    /// Print only the final summary (progress lines are not printed, and not sent to the
    /// callback either).
    pub fn quiet(mut self, quiet: bool) -> Self {
        self.quiet = quiet;
        self
    }

    /// Every progress line (start, evaluations, the tuner's decisions, warnings) goes to `f`
    /// instead of the terminal.
    pub fn on_progress(mut self, f: impl FnMut(&str) + Send + 'static) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Stop cleanly on Ctrl-C and SIGTERM (write a checkpoint, then return
    /// [`SessionError::Interrupted`]), as `crossbow train` does. Off by default: a library does
    /// not take over its host program's signals unless asked.
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.signals = on;
        self
    }

    /// The validated settings of this run (what it would train with; resuming: the
    /// checkpoint's, with the changes given), and its checkpoint and divergence policies.
    pub fn resolve(&self) -> Result<TrainConfig, SessionError> {
        Ok(self.plan(&crossbow_replica::Solo)?.cfg)
    }

    fn plan(&self, world: &dyn crossbow_replica::ProcessGroup) -> Result<Plan, SessionError> {
        let given = self.file.as_ref().map(|(_, f)| f.clone()).unwrap_or_default().overridden_by(self.settings.clone());
        let metrics_given = given.metrics.is_some();
        let resumed = match &self.resume {
            Some(p) => Some(checkpoint::load_in_world(p, world, &mut |w| eprintln!("warning: {w}"))?),
            None => None,
        };
        let mut saved_policies = None;
        let mut changes = vec![];
        let file = self.file.as_ref().map(|(p, f)| (p.as_path(), f.clone()));
        let cfg = match &resumed {
            None => TrainConfig::from_sources(file, self.settings.clone(), &self.registry)?,
            Some((path, ckpt)) => {
                let mut saved = saved_settings(ckpt.state.get("config").cloned().unwrap_or_default(), &self.registry)
                    .map_err(|e| {
                    SessionError::usage(format!("--resume {}: the saved settings are unreadable: {e}", path.display()))
                })?;
                if saved.normalize.is_none() {
                    saved.normalize = resume::saved_normalize(&ckpt.state);
                }
                // Refuse what may not change, then build as if the checkpoint were the config
                // file (a value from it is named by the checkpoint's path).
                let from_file = file.map(|(_, f)| f).unwrap_or_default();
                resume::merge(saved.clone(), from_file.clone().overridden_by(self.settings.clone()))?;
                let c: Option<CheckpointPolicy> =
                    serde_json::from_value(ckpt.state.get("checkpoint_policy").cloned().unwrap_or_default())
                        .unwrap_or(None);
                let d: Option<DivergencePolicy> =
                    serde_json::from_value(ckpt.state.get("divergence_policy").cloned().unwrap_or_default())
                        .unwrap_or(None);
                saved_policies = d.map(|d| (c, d));
                let cfg = TrainConfig::from_sources(
                    Some((path.as_path(), saved.clone().overridden_by(from_file))),
                    self.settings.clone(),
                    &self.registry,
                )?;
                changes = resume::changes(&saved, &resume::config_to_file(&cfg));
                cfg
            }
        };
        let (policy, divergence) = CheckpointArgs::of(&cfg)
            .resolve(saved_policies.as_ref().map(|(c, d)| (c, d)), resumed.as_ref().map(|(p, _)| p.as_path()))?;
        Ok(Plan { cfg, resumed, policy, divergence, changes, metrics_given })
    }

    /// Trains to the end (the epoch limit, the target accuracy, a divergence it cannot
    /// recover from, or a signal when [`Session::handle_signals`] is on) and returns the
    /// summary. Under `mpirun`/`srun` this process is one rank of the job (with the `mpi`
    /// feature); every rank calls `run`.
    pub fn run(self) -> Result<Summary, SessionError> {
        self.start()?.run()
    }

    /// The run started, ready for its first iteration: a [`Trainer`] to take one iteration
    /// at a time ([`Session::run`] is `start()?.run()`).
    pub fn start(self) -> Result<Trainer, SessionError> {
        // Signals are honoured from the start: a Ctrl-C while the data load or the engine
        // starts stops the run before its first iteration (nothing to save yet).
        let interrupt = if self.signals { Interrupt::install()? } else { Interrupt::none() };
        let given = self.file.as_ref().map(|(_, f)| f.clone()).unwrap_or_default().overridden_by(self.settings.clone());
        if let Some(t) = given.mpi_timeout
            && !(t.is_finite() && t > 0.0)
        {
            return Err(SessionError::usage(format!("--mpi-timeout must be a positive number, got {t}")));
        }
        // With several ranks, rank 0 reads the checkpoint and broadcasts it.
        let world = crate::processes::World::start(given.mpi_timeout)?;
        match self.start_in(&world, interrupt) {
            Ok(steps) => Ok(Trainer::started(steps, world)),
            Err(e) => {
                // Every rank stops on a signal after the same iteration (they agree on it),
                // and exits by itself once rank 0's checkpoint is on disk.
                if !matches!(e, SessionError::Interrupted { .. }) {
                    world.stop_all(&format!("error: {e}"), e.exit_code() as u8);
                }
                Err(e)
            }
        }
    }

    fn start_in(
        mut self,
        world: &crate::processes::World,
        interrupt: Interrupt,
    ) -> Result<Box<dyn crate::train::Steps>, SessionError> {
        let Plan { mut cfg, resumed, policy, divergence, changes, metrics_given } = self.plan(&*world.group)?;
        // A resumed run's saved metrics file is relative to its checkpoint folder; a copied or
        // moved folder whose metrics lay outside it writes its own, inside it (never into the
        // original run's file).
        let mut metrics_note = None;
        if let (Some((_, ckpt)), Some(p), false) = (&resumed, &policy, metrics_given)
            && let Some(m) = cfg.metrics.as_mut()
        {
            let written_in = ckpt.state.get("folder").and_then(|v| v.as_str()).map(PathBuf::from);
            let here = std::fs::canonicalize(&p.dir).ok();
            let elsewhere = matches!((&written_in, &here), (Some(a), Some(b)) if a != b);
            let outside = m.is_absolute() || m.components().next() == Some(std::path::Component::ParentDir);
            if elsewhere && outside {
                let own = p.dir.join("metrics.jsonl");
                metrics_note = Some(format!(
                    "resume: the checkpoint was written in {} and its metrics went to {}; this copy writes its own: {} (--metrics to choose)",
                    written_in.as_deref().unwrap_or(Path::new("?")).display(),
                    paths::resolve_against(m, written_in.as_deref().unwrap_or(&p.dir)).display(),
                    own.display()
                ));
                *m = own;
            } else {
                *m = paths::resolve_against(m, &p.dir);
            }
        }
        if world.size() > 1 {
            cfg.metrics = cfg.metrics.as_deref().map(|p| world.metrics_path(p));
        }
        let fatal = policy.as_ref().is_some_and(|p| p.on_error == checkpoint::OnWriteError::Fatal);
        // A resumed run appends to its own metrics file; any other existing file is refused.
        let owner = resumed.as_ref().and_then(|(_, c)| checkpoint::Line::of_state(&c.state)).map(|l| l.run);
        let mut reporter = Reporter::for_config(&cfg, self.quiet, owner.as_deref())?.metrics_errors_fatal(fatal);
        if let Some(f) = self.progress.take() {
            reporter = reporter.with_sink(f);
        }
        if world.size() > 1 {
            reporter = reporter.for_rank(world.rank());
        }
        if resumed.is_some() {
            reporter = reporter.append_to_metrics();
        }
        for c in &changes {
            reporter.say(&format!("resume: {c}"));
        }
        if let Some(n) = &metrics_note {
            reporter.warn(n);
        }
        // Rank 0 writes the checkpoints: as which run and line (a resume from an older
        // checkpoint of a line is a branch: a new line, the newer files stay).
        let line = match (&resumed, &policy) {
            (Some((path, ckpt)), Some(p)) if world.rank() == 0 => {
                let (line, note) = checkpoint::line_for_resume(&ckpt.state, path, &p.dir);
                if let Some(n) = note {
                    reporter.warn(&format!("resume: {n}"));
                }
                Some(line)
            }
            (Some((_, ckpt)), None) => checkpoint::Line::of_state(&ckpt.state),
            _ => None,
        };
        let opts = train::RunOptions {
            resume: resumed,
            checkpoint: policy,
            divergence,
            interrupt,
            world: std::sync::Arc::clone(&world.group),
            line,
            data: self.data.take(),
        };
        train::start(&cfg, &self.registry, reporter, opts)
    }
}

/// What a session resolved before it runs.
struct Plan {
    cfg: TrainConfig,
    resumed: Option<(PathBuf, crossbow_replica::checkpoint::CheckpointFile)>,
    policy: Option<CheckpointPolicy>,
    divergence: DivergencePolicy,
    changes: Vec<String>,
    metrics_given: bool,
}

/// A checkpoint's saved settings. Runs saved before synchronisers owned their settings have
/// SMA's as top-level keys (`alpha`, `central-momentum` at its default even for S-SGD,
/// `sma-form`): they become the run's synchroniser's options, or are dropped where it does not
/// read them (such a run saved them unset or at their default).
pub(crate) fn saved_settings(config: serde_json::Value, registry: &SyncRegistry) -> Result<TrainFile, String> {
    let flags = registry.option_flags();
    let legacy = config.as_object().is_some_and(|m| flags.iter().any(|(f, _)| m.contains_key(f)));
    if !legacy {
        return serde_json::from_value(config).map_err(|e| e.to_string());
    }
    let mut map = config.as_object().cloned().unwrap_or_default();
    map.retain(|_, v| !v.is_null());
    let mut table: toml::Table = serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| e.to_string())?;
    registry.lift_option_keys(&mut table, true)?;
    toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| e.message().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A checkpoint saved while SMA's settings were settings of every run still resumes:
    /// its keys become the options of the run's synchroniser, or are dropped where it does not
    /// read them.
    #[test]
    fn settings_saved_before_synchronisers_owned_them_still_read() {
        let r = SyncRegistry::builtin();
        let sma = json!({ "sync": "sma", "lr": 0.05, "alpha": 0.1, "central-momentum": 0.9, "sma-form": "paper" });
        let f = saved_settings(sma, &r).unwrap();
        assert_eq!(f.lr, Some(0.05));
        let opts = f.sync_options.clone().unwrap();
        let text = |k: &str| opts.get(k).map(|v| v.to_string());
        assert_eq!(
            (text("alpha"), text("central-momentum"), text("sma-form")),
            (Some("0.1".into()), Some("0.9".into()), Some("\"paper\"".into()))
        );
        let cfg = TrainConfig::from_file(f).unwrap();
        let s = r.build_for(&cfg).unwrap().cpu();
        assert_eq!(s.settings().to_string(), "form=paper alpha=0.1 central_momentum=0.9");
        // S-SGD runs saved SMA's central momentum at its default: it is not S-SGD's.
        let f = saved_settings(json!({ "sync": "ssgd", "central-momentum": 0.9, "alpha": null }), &r).unwrap();
        assert_eq!(f.sync_options, None);
        assert!(r.build_for(&TrainConfig::from_file(f).unwrap()).is_ok());
        // A checkpoint of today reads as it was written.
        let f = saved_settings(json!({ "sync": "sma", "sync-options": { "alpha": "0.2" } }), &r).unwrap();
        assert_eq!(f.sync_options.unwrap().get("alpha"), Some(&toml::Value::String("0.2".into())));
    }
}
