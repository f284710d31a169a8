//! The synchronisers of this crate by name, each with the options it owns: their keys, the
//! flags of their own (`--alpha`, `--central-momentum`, `--sma-form`), defaults, checks and
//! help. A registry (`crossbow_session::registry::SyncRegistry::builtin`) collects
//! [`entries`]; it knows none of these settings by name.

use crossbow_replica::catalog::{OptionSpec, SyncEntry, SyncOptions};

use crate::{AlphaRule, BnParams, CentralStep, DecayOn, EaSgd, SSgd, Sma, SmaForm};

/// SMA's pull toward the central model (also EA-SGD's, with another default).
const ALPHA: &str = "alpha";
/// SMA's central momentum `μ_z`.
const CENTRAL_MOMENTUM: &str = "central-momentum";
/// SMA's learner update form.
const SMA_FORM: &str = "sma-form";
/// The default of [`CENTRAL_MOMENTUM`].
pub const DEFAULT_CENTRAL_MOMENTUM: f32 = 0.9;

/// `alpha` as a number in `[0, 1]`, when given: a pull above 1 moves a learner past the
/// central model (it oscillates and diverges).
fn fixed_alpha(o: &SyncOptions) -> Result<Option<f32>, String> {
    match o.get(ALPHA) {
        None => Ok(None),
        Some(t) => match t.trim().parse::<f64>() {
            Ok(a) if a.is_finite() && (0.0..=1.0).contains(&a) => Ok(Some(a as f32)),
            Ok(a) if a.is_finite() && a > 1.0 => {
                Err(format!("--alpha (the pull towards the central model) must be in [0, 1], got {t}"))
            }
            _ => Err(format!("--alpha must be a finite number in [0, 1], got {t}")),
        },
    }
}

/// SMA from its options.
pub fn sma_from(o: &SyncOptions) -> Result<Sma, String> {
    let alpha = fixed_alpha(o)?;
    let cm = match o.get(CENTRAL_MOMENTUM) {
        None => DEFAULT_CENTRAL_MOMENTUM,
        Some(t) => match t.trim().parse::<f32>() {
            Ok(m) if (0.0..1.0).contains(&m) => m,
            _ => return Err(format!("--central-momentum must be in [0, 1), got {t}")),
        },
    };
    let mut sma = Sma::new(alpha, cm);
    if let Some(f) = o.get(SMA_FORM) {
        sma = sma.with_form(SmaForm::parse(f).map_err(|e| format!("--sma-form: {e}"))?);
    }
    if let Some(rule) = o.get("alpha-rule") {
        if alpha.is_some() {
            return Err("give either --alpha or the option alpha-rule, not both".into());
        }
        sma = sma.with_alpha(AlphaRule::parse(rule).map_err(|e| format!("option alpha-rule: {e}"))?);
    }
    if let Some(v) = o.get("central-step") {
        sma = sma.with_central_step(CentralStep::parse(v).map_err(|e| format!("option {e}"))?);
    }
    if let Some(v) = o.get("bn-params") {
        sma = sma.with_bn_params(BnParams::parse(v).map_err(|e| format!("option {e}"))?);
    }
    if let Some(v) = o.get("weight-decay-on") {
        sma = sma.with_decay_on(DecayOn::parse(v).map_err(|e| format!("option {e}"))?);
    }
    if let Some(v) = o.get("ssgd-until") {
        match v.trim().parse::<f64>() {
            Ok(e) if e.is_finite() && e >= 0.0 => sma = sma.with_ssgd_until(Some(e)),
            _ => return Err(format!("option ssgd-until={v}: must be an epoch >= 0 (S-SGD before it, SMA from it on)")),
        }
    }
    Ok(sma)
}

/// EA-SGD from its options.
pub fn easgd_from(o: &SyncOptions) -> Result<EaSgd, String> {
    Ok(EaSgd::new(fixed_alpha(o)?))
}

/// SMA's entry: its options and their flags.
pub fn sma_entry() -> SyncEntry {
    SyncEntry::new("sma", "synchronous model averaging (Crossbow's; `--sync sma`)", sma_from)
        .option(OptionSpec::new(ALPHA, "1/k", "pull of each learner toward the central model, in [0, 1]").with_flag())
        .option(OptionSpec::new(CENTRAL_MOMENTUM, "0.9", "momentum of the central model, in [0, 1)").with_flag())
        .option(
            OptionSpec::new(
                SMA_FORM,
                "local-momentum",
                "learner update: paper (plain SGD steps, momentum only on the central model) or local-momentum (learners keep momentum too, as the original code)",
            )
            .with_flag(),
        )
        .option(OptionSpec::new("alpha-rule", "1/k", "alpha as a rule: 1/k, 1/sqrt(k), ramp:E or a number"))
        .option(OptionSpec::new("central-step", "sum", "sum | mean of the corrections"))
        .option(OptionSpec::new("bn-params", "average", "batch-norm scales and shifts: average | local | a pull"))
        .option(OptionSpec::new("weight-decay-on", "learners", "learners | central"))
        .option(OptionSpec::new(
            "ssgd-until",
            "none",
            "an epoch: S-SGD before it, SMA after (post-local SGD; put it at the first rate drop)",
        ))
}

/// S-SGD's entry (no options).
pub fn ssgd_entry() -> SyncEntry {
    SyncEntry::new(
        "ssgd",
        "synchronous SGD: mean gradient, one step on the central model, copied to every learner (the default for batch-normalised models)",
        |_: &SyncOptions| Ok(SSgd::default()),
    )
    .alias("sgd")
    .alias("sync")
}

/// EA-SGD's entry.
pub fn easgd_entry() -> SyncEntry {
    SyncEntry::new("easgd", "elastic averaging SGD (synchronous)", easgd_from)
        .alias("elastic")
        .option(OptionSpec::new(ALPHA, "0.9/k", "moving rate toward the central model, in [0, 1]").with_flag())
}

/// Every synchroniser of this crate: `sma`, `ssgd`, `easgd`.
pub fn entries() -> Vec<SyncEntry> {
    vec![sma_entry(), ssgd_entry(), easgd_entry()]
}
