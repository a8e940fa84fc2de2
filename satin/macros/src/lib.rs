//! The `#[satin::job]` attribute (re-exported by the `satin` crate).

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, ItemImpl, LitStr};

/// Marks an `impl satin::Job for T` block as remote-capable and registers `T` by name.
///
/// Adds `const REMOTE = Some(Remote::serde(NAME))` to the impl and submits a
/// `JobRegistration` to the program-wide inventory. `NAME` is
/// `concat!(module_path!(), "::", "T")` unless given as `#[job(name = "...")]`.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut name: Option<LitStr> = None;
    if !attr.is_empty() {
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("name") {
                name = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error("expected `name = \"...\"`"))
            }
        });
        parse_macro_input!(attr with parser);
    }
    let mut imp = parse_macro_input!(item as ItemImpl);
    if !imp.generics.params.is_empty() {
        return syn::Error::new_spanned(
            &imp.generics,
            "#[satin::job] does not support generic impls",
        )
        .to_compile_error()
        .into();
    }
    if imp.trait_.is_none() {
        return syn::Error::new_spanned(
            &imp.self_ty,
            "#[satin::job] goes on `impl satin::Job for T`",
        )
        .to_compile_error()
        .into();
    }
    let ty = imp.self_ty.clone();
    let ty_str: String = quote!(#ty)
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let name_expr = match name {
        Some(n) => quote!(#n),
        None => quote!(::core::concat!(::core::module_path!(), "::", #ty_str)),
    };
    imp.items.push(syn::parse_quote! {
        const REMOTE: ::core::option::Option<::satin::Remote<Self>> =
            ::core::option::Option::Some(::satin::Remote::serde(#name_expr));
    });
    quote! {
        #imp
        ::satin::__private::inventory::submit! {
            ::satin::JobRegistration::of::<#ty>(#name_expr)
        }
    }
    .into()
}
