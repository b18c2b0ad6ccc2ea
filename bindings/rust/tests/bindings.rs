//! Tests of the Rust bindings: `cargo test --offline` in bindings/rust.
//!
//! Environment:
//!   CLADE_TEST_MODEL  a GGUF model with a 300-token vocabulary to use as is
//!   CLADE_CLI         the clade tool used to write random models otherwise
//!                     (default: ../../build/examples/clade)
//!   CLADE_VOCAB_DIR   reference vocabularies (default: ../../../shared/data/vocab);
//!                     the tokenizer test is skipped without them
//!   CLADE_LIB_DIR     where libclade.so is (build time; default ../../build)

use clade::{Cache, CacheParams, ErrorKind, KvType, Model, ModelParams, Sampler, SamplerParams, Token, Tree,
            TreeParams, ROOT};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Cargo's scratch folder for integration tests, inside the target dir.
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("clade-rs-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fn cli() -> PathBuf {
    match std::env::var("CLADE_CLI") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => manifest().join("../../build/examples/clade"),
    }
}

fn random_model(name: &str, extra: &[&str]) -> PathBuf {
    let path = tmp_dir().join(name);
    if !path.exists() {
        let st = Command::new(cli())
            .args(["model", "random", "-o"])
            .arg(&path)
            .args(["--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ff", "128",
                   "--type", "f32", "--seed", "7"])
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} (set CLADE_CLI): {e}", cli().display()));
        assert!(st.status.success(), "clade model random failed: {}", String::from_utf8_lossy(&st.stderr));
    }
    path
}

fn small_model() -> Model {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| match std::env::var("CLADE_TEST_MODEL") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => random_model("small.gguf", &["--vocab", "300"]),
    });
    Model::load_with(path, &ModelParams { n_threads: 1, ..ModelParams::default() }).unwrap()
}

fn argmax(row: &[f32]) -> Token {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as Token
}

fn greedy(cache: &mut Cache, seq: clade::SeqId, first: Vec<f32>, n: usize) -> Vec<Token> {
    let mut out = Vec::new();
    let mut row = first;
    for _ in 0..n {
        out.push(argmax(&row));
        let last = [*out.last().unwrap()];
        row = cache.decode(&[(seq, &last[..])], false).unwrap().remove(0);
    }
    out
}

#[test]
fn version_and_info() {
    assert_eq!(clade::version(), clade::sys::CLADE_VERSION_STRING);
    let m = small_model();
    let i = m.info().unwrap();
    assert_eq!(i.architecture, "llama");
    assert_eq!((i.n_layers, i.n_embd, i.n_heads, i.n_kv_heads), (2, 64, 4, 2));
    assert_eq!((i.head_dim, i.n_ff, i.n_vocab), (16, 128, 300));
    assert_eq!(i.weight_type, clade::sys::CLADE_WEIGHT_F32);
    assert!(i.n_params > 0);
    assert_eq!(m.n_vocab(), 300);
}

#[test]
fn shared_prefix_equals_alone() {
    let m = small_model();
    let prompt: Vec<Token> = vec![5, 17, 42, 99, 3, 250, 11, 64, 7, 123];
    let suffixes: [&[Token]; 3] = [&[21], &[150, 9], &[299]];
    let n = 8;
    let tree = Tree::new(&m, TreeParams { kv_type: KvType::F32, ..TreeParams::default() }).unwrap();
    let (node, node_logits) = tree.append_logits(ROOT, &prompt).unwrap();
    assert_eq!(node_logits.len(), 300);
    let info = tree.node_info(node).unwrap();
    assert_eq!((info.parent, info.length, info.path_length), (Some(0), prompt.len() as i32, 0));
    assert_eq!(tree.node_tokens(node).unwrap(), prompt);

    let params = CacheParams { max_seqs: 4, max_tokens: 64, ..CacheParams::default() };
    let mut shared: Vec<Vec<Token>> = Vec::new();
    {
        let mut cache = Cache::new(&tree, params.clone()).unwrap();
        let seqs: Vec<_> = suffixes.iter().map(|s| cache.add(node, s, false).unwrap()).collect();
        let empty: Vec<(clade::SeqId, &[Token])> = seqs.iter().map(|&s| (s, &[][..])).collect();
        let rows = cache.decode(&empty, false).unwrap();
        assert_eq!(rows.len(), 3);
        for (s, suf) in seqs.iter().zip(&suffixes) {
            assert_eq!(cache.length(*s).unwrap(), suf.len() as i32);
        }
        shared.extend(rows.iter().map(|r| vec![argmax(r)]));
        for _ in 1..n {
            let last: Vec<[Token; 1]> = shared.iter().map(|o| [*o.last().unwrap()]).collect();
            let step: Vec<(clade::SeqId, &[Token])> =
                seqs.iter().zip(&last).map(|(&s, t)| (s, &t[..])).collect();
            let rows = cache.decode(&step, false).unwrap();
            for (o, r) in shared.iter_mut().zip(&rows) {
                o.push(argmax(r));
            }
        }
        assert!(cache.kv_bytes() > 0);
    }
    tree.release(node).unwrap();

    for (suf, want) in suffixes.iter().zip(&shared) {
        let mut cache = Cache::new(&tree, params.clone()).unwrap();
        let mut own = prompt.clone();
        own.extend_from_slice(suf);
        let s = cache.add(ROOT, &own, false).unwrap();
        let row = cache.decode(&[(s, &[][..])], false).unwrap().remove(0);
        assert_eq!(&greedy(&mut cache, s, row, n), want);
    }

    let mut cache = Cache::new(&tree, params).unwrap();
    let s = cache.add(ROOT, &prompt, false).unwrap();
    let row = cache.decode(&[(s, &[][..])], false).unwrap().remove(0);
    assert_eq!(argmax(&row), argmax(&node_logits));
    for (a, b) in row.iter().zip(&node_logits) {
        assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

#[test]
fn generate_and_sampler() {
    let m = small_model();
    let prompt: Vec<Token> = vec![1, 2, 3, 4, 5, 6];
    let out = clade::generate(&m, &prompt, 6, 3, 0.0, 0).unwrap();
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|o| o == &out[0] && o.len() == 6));
    let a = clade::generate(&m, &prompt, 6, 3, 1.0, 11).unwrap();
    let b = clade::generate(&m, &prompt, 6, 3, 1.0, 11).unwrap();
    assert_eq!(a, b);
    assert!(a.iter().flatten().all(|&t| (0..300).contains(&t)));

    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut cache = Cache::new(&tree, CacheParams::default()).unwrap();
    let s = cache.add(ROOT, &prompt, false).unwrap();
    let row = cache.decode(&[(s, &[][..])], false).unwrap().remove(0);
    let mut g = Sampler::greedy().unwrap();
    assert_eq!(g.sample(0, &row, &[]).unwrap(), argmax(&row));
    // a forgotten stream starts again from its first draw
    let mut r = Sampler::new(SamplerParams {
        temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 5, ..SamplerParams::default()
    })
    .unwrap();
    let first: Vec<Token> = (0..8).map(|_| r.sample(7, &row, &[]).unwrap()).collect();
    r.forget(7).unwrap();
    r.forget(12345).unwrap(); // never sampled: fine
    let again: Vec<Token> = (0..8).map(|_| r.sample(7, &row, &[]).unwrap()).collect();
    assert_eq!(first, again);
    assert_eq!(greedy(&mut cache, s, row, 6), out[0]);
}

#[test]
fn truncate_remove_cache_full() {
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut cache = Cache::new(&tree, CacheParams { max_seqs: 1, max_tokens: 6, ..CacheParams::default() }).unwrap();
    let s = cache.add(ROOT, &[1, 2, 3], false).unwrap();
    cache.decode(&[(s, &[4, 5][..])], false).unwrap();
    assert_eq!(cache.length(s).unwrap(), 5);
    let e = cache.decode(&[(s, &[6, 7][..])], false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CacheFull);
    assert_eq!(e.status, clade::sys::CLADE_CACHE_FULL);
    assert_eq!(cache.length(s).unwrap(), 5);
    cache.truncate(s, 2).unwrap();
    assert_eq!(cache.decode(&[(s, &[7, 8][..])], true).unwrap().len(), 2);
    assert_eq!(cache.add(ROOT, &[], false).unwrap_err().kind, ErrorKind::CacheFull);
    cache.remove(s).unwrap();
    let e = cache.length(s).unwrap_err();
    assert_eq!(e.kind, ErrorKind::State);
    assert!(!e.message.is_empty());
}

#[test]
fn bad_token() {
    let m = small_model();
    let bad = m.n_vocab() as Token + 5;
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let e = tree.append(ROOT, &[1, bad]).unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Token, clade::sys::CLADE_E_TOKEN));
    assert!(!e.message.is_empty());
    assert!(e.to_string().contains(&e.message));
    let mut cache = Cache::new(&tree, CacheParams::default()).unwrap();
    assert_eq!(cache.add(ROOT, &[bad], false).unwrap_err().kind, ErrorKind::Token);
    let s = cache.add(ROOT, &[1], false).unwrap();
    assert_eq!(cache.decode(&[(s, &[-1][..])], false).unwrap_err().kind, ErrorKind::Token);
    assert_eq!(cache.length(s).unwrap(), 0);
    assert_eq!(tree.release(ROOT).unwrap_err().kind, ErrorKind::State);
}

#[test]
fn bad_path() {
    let missing = tmp_dir().join("does-not-exist.gguf");
    let e = Model::load(&missing).unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Io, clade::sys::CLADE_E_IO));
    assert!(e.message.contains("does-not-exist"), "{}", e.message);
    let junk = tmp_dir().join("junk.gguf");
    std::fs::write(&junk, b"this is not a gguf file at all, not at all").unwrap();
    assert_eq!(Model::load(&junk).unwrap_err().kind, ErrorKind::Format);
}

#[test]
fn tokenizer_round_trip() {
    let dir = match std::env::var("CLADE_VOCAB_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => manifest().join("../../../shared/data/vocab"),
    };
    let vocab = dir.join("ggml-vocab-llama-spm.gguf");
    if !vocab.exists() {
        eprintln!("SKIP tokenizer_round_trip: no reference vocabulary at {}", vocab.display());
        return;
    }
    let path = random_model("spm.gguf", &["--vocab-from", vocab.to_str().unwrap()]);
    let m = Model::load_with(&path, &ModelParams { n_threads: 1, ..ModelParams::default() }).unwrap();
    let sp = m.special_tokens().unwrap();
    for text in ["Hello world", "héllo, wörld! 日本語 🙂", "  two  spaces\nand a line", "x = f(y) + 42;"] {
        let ids = m.tokenize(text, true, false).unwrap();
        if sp.add_bos {
            assert_eq!(Some(ids[0]), sp.bos);
        }
        assert_eq!(m.detokenize(&ids, false).unwrap(), text);
        let mut d = clade::Detokenizer::new(&m, false, true).unwrap();
        let mut bytes = Vec::new();
        for &t in &ids {
            bytes.extend(d.push(t).unwrap());
        }
        bytes.extend(d.flush().unwrap());
        assert_eq!(String::from_utf8(bytes).unwrap(), text);
    }
    assert_eq!(m.tokenize("", false, false).unwrap(), Vec::<Token>::new());
    let e = m.tokenize_bytes(b"ok \xff\xfe", true, false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Utf8);
}
