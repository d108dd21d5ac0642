//! The functions of a crate's product code, with their length in lines and whether
//! they silence clippy's `too_many_arguments`.
//!
//! Product code is what the crate root reaches through `mod` declarations that are not
//! `#[cfg(test)]`: a `tests.rs` declared as `#[cfg(test)] mod tests;` and inline test
//! modules are left out, as are `#[test]` functions anywhere. Binaries under `src/bin`
//! are roots of their own.

use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// One function or method with a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The file, relative to the directory the crate was read from.
    pub file: PathBuf,
    /// `name`, or `Type::name` for a method.
    pub name: String,
    /// From the line of `fn` to the line of the body's closing brace.
    pub lines: usize,
    /// Carries `#[allow(clippy::too_many_arguments)]`.
    pub allows_too_many_arguments: bool,
}

/// Why a crate could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(PathBuf, std::io::Error),
    Parse(PathBuf, syn::Error),
    MissingModule {
        declared_in: PathBuf,
        module: String,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(path, e) => write!(f, "{}: {e}", path.display()),
            ReadError::Parse(path, e) => {
                let at = e.span().start();
                write!(f, "{}:{}:{}: {e}", path.display(), at.line, at.column)
            }
            ReadError::MissingModule {
                declared_in,
                module,
            } => write!(f, "{}: `mod {module};` has no file", declared_in.display()),
        }
    }
}

/// Every product function of the crate whose `src/` directory is `src`.
pub fn of_crate(src: &Path) -> Result<Vec<Function>, ReadError> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .filter(|path| path.exists())
        .collect();
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    let mut out = Vec::new();
    for root in roots {
        read_module(src, &root, true, &mut out)?;
    }
    Ok(out)
}

/// The functions of one source text (tests of this module use it directly).
pub fn of_source(file: &Path, source: &str) -> Result<(Vec<Function>, Vec<String>), syn::Error> {
    let syntax = syn::parse_file(source)?;
    let mut collector = Collector {
        file: file.to_path_buf(),
        impl_type: None,
        functions: Vec::new(),
        child_modules: Vec::new(),
    };
    collector.visit_file(&syntax);
    Ok((collector.functions, collector.child_modules))
}

fn read_module(
    src: &Path,
    path: &Path,
    owns_directory: bool,
    out: &mut Vec<Function>,
) -> Result<(), ReadError> {
    let source = std::fs::read_to_string(path).map_err(|e| ReadError::Io(path.to_path_buf(), e))?;
    let relative = path.strip_prefix(src).unwrap_or(path);
    let (functions, children) =
        of_source(relative, &source).map_err(|e| ReadError::Parse(path.to_path_buf(), e))?;
    out.extend(functions);
    // `lib.rs`, `main.rs` and `mod.rs` declare children beside them; `a.rs` in `a/`.
    let dir = if owns_directory {
        path.parent().expect("a file has a directory").to_path_buf()
    } else {
        path.with_extension("")
    };
    for child in children {
        let flat = dir.join(format!("{child}.rs"));
        let nested = dir.join(&child).join("mod.rs");
        if flat.exists() {
            read_module(src, &flat, false, out)?;
        } else if nested.exists() {
            read_module(src, &nested, true, out)?;
        } else {
            return Err(ReadError::MissingModule {
                declared_in: path.to_path_buf(),
                module: child,
            });
        }
    }
    Ok(())
}

struct Collector {
    file: PathBuf,
    impl_type: Option<String>,
    functions: Vec<Function>,
    /// `mod x;` declarations (not `#[cfg(test)]`) whose files are read next.
    child_modules: Vec<String>,
}

impl Collector {
    fn record(
        &mut self,
        name: String,
        attrs: &[syn::Attribute],
        sig: &syn::Signature,
        body: &syn::Block,
    ) {
        let start = sig.span().start().line;
        let end = body.brace_token.span.close().end().line;
        self.functions.push(Function {
            file: self.file.clone(),
            name,
            lines: end + 1 - start,
            allows_too_many_arguments: attrs.iter().any(allows_too_many_arguments),
        });
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if is_test_only(&module.attrs) {
            return;
        }
        match &module.content {
            None => self.child_modules.push(module.ident.to_string()),
            Some(_) => syn::visit::visit_item_mod(self, module),
        }
    }

    fn visit_item_fn(&mut self, function: &'ast syn::ItemFn) {
        if is_test_only(&function.attrs) {
            return;
        }
        self.record(
            function.sig.ident.to_string(),
            &function.attrs,
            &function.sig,
            &function.block,
        );
        syn::visit::visit_item_fn(self, function);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if is_test_only(&item.attrs) {
            return;
        }
        let outer = self.impl_type.replace(type_name(&item.self_ty));
        syn::visit::visit_item_impl(self, item);
        self.impl_type = outer;
    }

    fn visit_impl_item_fn(&mut self, method: &'ast syn::ImplItemFn) {
        if is_test_only(&method.attrs) {
            return;
        }
        let name = match &self.impl_type {
            Some(ty) => format!("{ty}::{}", method.sig.ident),
            None => method.sig.ident.to_string(),
        };
        self.record(name, &method.attrs, &method.sig, &method.block);
        syn::visit::visit_impl_item_fn(self, method);
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        let outer = self.impl_type.replace(item.ident.to_string());
        syn::visit::visit_item_trait(self, item);
        self.impl_type = outer;
    }

    fn visit_trait_item_fn(&mut self, method: &'ast syn::TraitItemFn) {
        if let Some(body) = &method.default {
            let name = match &self.impl_type {
                Some(ty) => format!("{ty}::{}", method.sig.ident),
                None => method.sig.ident.to_string(),
            };
            self.record(name, &method.attrs, &method.sig, body);
        }
        syn::visit::visit_trait_item_fn(self, method);
    }
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        syn::Type::Reference(reference) => type_name(&reference.elem),
        _ => "_".to_string(),
    }
}

/// `#[cfg(test)]` or `#[test]` (also `#[tokio::test]`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

fn allows_too_many_arguments(attr: &syn::Attribute) -> bool {
    if !(attr.path().is_ident("allow") || attr.path().is_ident("expect")) {
        return false;
    }
    let mut found = false;
    let _ = attr.parse_nested_meta(|meta| {
        if meta
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "too_many_arguments")
        {
            found = true;
        }
        Ok(())
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(source: &str) -> Vec<(String, usize, bool)> {
        of_source(Path::new("x.rs"), source)
            .unwrap()
            .0
            .into_iter()
            .map(|f| (f.name, f.lines, f.allows_too_many_arguments))
            .collect()
    }

    #[test]
    fn counts_from_fn_to_the_closing_brace_and_names_methods_by_their_type() {
        let source = "/// doc\n#[inline]\npub async fn a() {\n    let s = \"}}}\";\n    // }\n}\n\nstruct T;\nimpl<'a> Clone for &'a T {\n    fn clone(&self) -> Self { self }\n}\ntrait U {\n    fn u(&self) {\n    }\n    fn v(&self);\n}\n";
        assert_eq!(
            lengths(source),
            vec![
                ("a".into(), 4, false),
                ("T::clone".into(), 1, false),
                ("U::u".into(), 2, false),
            ]
        );
    }

    #[test]
    fn leaves_out_tests_and_test_modules_and_follows_product_modules_only() {
        let source = "mod product;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline { fn helper() {} }\n#[test]\nfn t() {}\n#[tokio::test]\nasync fn u() {}\nfn kept() {}\n";
        let (functions, children) = of_source(Path::new("lib.rs"), source).unwrap();
        assert_eq!(children, vec!["product".to_string()]);
        let names: Vec<_> = functions.into_iter().map(|f| f.name).collect();
        assert_eq!(names, vec!["kept".to_string()]);
    }

    #[test]
    fn sees_an_allowed_too_many_arguments_and_nested_functions() {
        let source = "#[allow(clippy::too_many_arguments, dead_code)]\nfn many(a: u8, b: u8) {\n    fn inner() {}\n}\n#[allow(dead_code)]\nfn few() {}\n";
        assert_eq!(
            lengths(source),
            vec![
                ("many".into(), 3, true),
                ("inner".into(), 1, false),
                ("few".into(), 1, false),
            ]
        );
    }

    #[test]
    fn reads_a_crate_through_its_module_files() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir_all(src.join("a")).unwrap();
        std::fs::create_dir_all(src.join("bin")).unwrap();
        std::fs::write(
            src.join("lib.rs"),
            "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n",
        )
        .unwrap();
        std::fs::write(src.join("a.rs"), "mod c;\nfn in_a() {}\n").unwrap();
        std::fs::write(src.join("a/c.rs"), "fn in_c() {}\n").unwrap();
        std::fs::create_dir_all(src.join("b")).unwrap();
        std::fs::write(src.join("b/mod.rs"), "fn in_b() {}\n").unwrap();
        std::fs::write(src.join("tests.rs"), "fn not_product() {}\n").unwrap();
        std::fs::write(src.join("bin/tool.rs"), "fn main() {}\n").unwrap();
        let found: Vec<_> = of_crate(src)
            .unwrap()
            .into_iter()
            .map(|f| (f.file.display().to_string(), f.name))
            .collect();
        assert_eq!(
            found,
            vec![
                ("a.rs".to_string(), "in_a".to_string()),
                ("a/c.rs".to_string(), "in_c".to_string()),
                ("b/mod.rs".to_string(), "in_b".to_string()),
                ("bin/tool.rs".to_string(), "main".to_string()),
            ]
        );
        std::fs::write(src.join("lib.rs"), "mod gone;\n").unwrap();
        let error = of_crate(src).unwrap_err().to_string();
        assert!(
            error.ends_with("lib.rs: `mod gone;` has no file"),
            "{error}"
        );
    }
}
