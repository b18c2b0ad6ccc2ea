//! Structured output through the Rust binding (clade 1.5): a JSON Schema's
//! outputs hold the required keys, a regex's match it whole, and a bad
//! schema's error names the keyword. Environment as tests/bindings.rs.
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use clade::{FinishReason, Grammar, GrammarKind, GrammarParams, Model, ModelParams, Prompt, Tree, TreeParams};

fn spm_model() -> Model {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = match std::env::var("CLADE_VOCAB_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => manifest.join("../../tests/data/vocab"),
    };
    let vocab = dir.join("ggml-vocab-llama-spm.gguf");
    assert!(vocab.exists(), "no reference vocabulary at {} (set CLADE_VOCAB_DIR)", vocab.display());
    let cli = match std::env::var("CLADE_CLI") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => manifest.join("../../build/tools/clade/clade"),
    };
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("clade-rs-grammar-{}.gguf", std::process::id()));
    let st = Command::new(&cli)
        .args(["model", "random", "-o"])
        .arg(&path)
        .args(["--layers", "1", "--dim", "32", "--heads", "2", "--kv-heads", "1", "--ff", "64", "--type", "f32",
               "--seed", "5", "--vocab-from", vocab.to_str().unwrap()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (set CLADE_CLI): {e}", cli.display()));
    assert!(st.status.success(), "clade model random failed: {}", String::from_utf8_lossy(&st.stderr));
    let m = Model::load_with(&path, &ModelParams { n_threads: 1, ..ModelParams::default() }).unwrap();
    let _ = std::fs::remove_file(&path);
    m
}

#[test]
fn grammar_generation() {
    let m = spm_model();
    let schema = r#"{"type":"object","properties":{"name":{"type":"string","maxLength":8},"ok":{"type":"boolean"}},
                     "required":["name","ok"],"additionalProperties":false}"#;
    let g = Arc::new(Grammar::json_schema(&m, schema).unwrap());
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let prompt = m.tokenize("A record:", true, false).unwrap();
    let mut p = clade::GenerateParams::default();
    p.max_new_tokens = 100;
    p.n_samples = 4;
    p.sampler.temperature = 0.9;
    p.grammars = vec![Some(g.clone())];
    let res = tree.generate(&[Prompt::new(&prompt)], &p).unwrap();
    let mut finished = 0;
    for r in &res {
        if r.finish != FinishReason::StopToken {
            continue;
        }
        finished += 1;
        assert!(r.text.starts_with("{\"name\":\"") && r.text.contains("\",\"ok\":") && r.text.ends_with('}'),
                "{}", r.text);
        assert!(r.text.ends_with("true}") || r.text.ends_with("false}"), "{}", r.text);
    }
    assert!(finished > 0);

    let re = Arc::new(Grammar::new(&m, "(yes|no)", GrammarParams { kind: GrammarKind::Regex,
                                                                    ..Default::default() }).unwrap());
    p.grammars = vec![Some(re)];
    for r in tree.generate(&[Prompt::new(&prompt)], &p).unwrap() {
        assert!(r.text == "yes" || r.text == "no", "{}", r.text);
    }

    let e = Grammar::json_schema(&m, r#"{"type":"array","uniqueItems":true}"#).unwrap_err();
    assert!(e.to_string().contains("uniqueItems"), "{e}");
}
