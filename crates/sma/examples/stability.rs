//! The stable learning rates of SMA's linearised update (`crossbow_sma::stability`), as a
//! table over learners, pulls and central momenta:
//!
//! ```sh
//! cargo run --release -p crossbow-sma --example stability             # the default table
//! cargo run --release -p crossbow-sma --example stability -- 0.9 4 0.1 0.9 local-momentum
//! #                                          learner momentum, k, alpha (or 1/k), central momentum, form
//! ```

use crossbow_sma::stability::Linearised;
use crossbow_sma::{AlphaRule, CentralStep, SmaForm};

fn line(form: SmaForm, k: usize, alpha: AlphaRule, mu: f64, muz: f64) -> String {
    let l = Linearised::new(form, k, alpha, CentralStep::Sum, mu, muz);
    format!("| {} | {k} | {alpha} | {muz} | {} |", form.name(), l.describe())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!("| form | k | alpha | central momentum | stable set (learner momentum 0.9 unless given) |");
    println!("|---|---:|---|---:|---|");
    if args.len() == 5 {
        let parsed = (
            args[0].parse::<f64>(),
            args[1].parse::<usize>(),
            AlphaRule::parse(&args[2]),
            args[3].parse::<f64>(),
            SmaForm::parse(&args[4]),
        );
        match parsed {
            (Ok(mu), Ok(k), Ok(alpha), Ok(muz), Ok(form)) if k >= 1 => println!("{}", line(form, k, alpha, mu, muz)),
            _ => {
                eprintln!(
                    "usage: stability [MOMENTUM K ALPHA CENTRAL_MOMENTUM FORM], e.g. 0.9 4 0.1 0.9 local-momentum"
                );
                std::process::exit(2);
            }
        }
        return;
    }
    for form in [SmaForm::LocalMomentum, SmaForm::Paper] {
        for muz in [0.9, 0.0] {
            for alpha in [AlphaRule::OneOverK, AlphaRule::Fixed(0.1), AlphaRule::Fixed(0.05), AlphaRule::Fixed(0.025)] {
                for k in [2, 4, 8] {
                    println!("{}", line(form, k, alpha, 0.9, muz));
                }
            }
        }
    }
}
