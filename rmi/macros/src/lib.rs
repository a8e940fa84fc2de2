//! The `#[remote]` attribute of `ibis-rmi` (use it as `ibis_rmi::remote`).
//!
//! On a trait `Foo` it keeps the trait (minus the method attributes it understands) and
//! generates, next to it:
//! - `FooStub`: the client side, a connected stub implementing `Foo` by remote calls,
//!   plus `<method>_async` variants returning `ibis_rmi::PendingCall`;
//! - `FooSkeleton<T>`: the server side for an object `T: Foo`, decoding requests;
//! - `FooRef`: `ibis_rmi::RemoteRef<dyn Foo>`, a serializable remote reference;
//! - `impl ibis_rmi::RemoteInterface for dyn Foo`.
//!
//! Every method takes `&self` and arguments that are serde values (or references to
//! them: `&[u8]`, `&str`, `&T`, decoded to their owned form on the server), and returns
//! `Result<T, E>` where `E: From<RmiError>`. Method attributes:
//! - `#[oneway]`: no reply; the method returns `()` (a failure to send is logged) or
//!   `Result<(), E>` (a failure to send is returned);
//! - `#[nonblocking]`: the server runs it in the port's receiving thread, with no thread
//!   switch (thesis 3.3.3); it must not block or run long.
//!
//! The README's example runs as a doc test of `ibis-rmi` (it needs the runtime).

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{
    parse_macro_input, spanned::Spanned, Error, FnArg, ItemTrait, ReturnType, TraitItem,
    TraitItemFn, Type,
};

/// Generates the stub, skeleton and reference type of a remote interface (see the crate
/// documentation).
#[proc_macro_attribute]
pub fn remote(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return Error::new(Span::call_site(), "#[remote] takes no arguments")
            .to_compile_error()
            .into();
    }
    let t = parse_macro_input!(item as ItemTrait);
    match expand(t) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

struct Method {
    name: syn::Ident,
    index: u16,
    args: Vec<Type>,
    ret: ReturnType,
    oneway: bool,
    nonblocking: bool,
}

fn take_flag(attrs: &mut Vec<syn::Attribute>, name: &str) -> bool {
    let before = attrs.len();
    attrs.retain(|a| !a.path().is_ident(name));
    attrs.len() != before
}

fn method(f: &mut TraitItemFn, index: usize) -> syn::Result<Method> {
    let oneway = take_flag(&mut f.attrs, "oneway");
    let nonblocking = take_flag(&mut f.attrs, "nonblocking");
    let sig = &f.sig;
    let index = u16::try_from(index)
        .map_err(|_| Error::new(sig.span(), "a remote interface has at most 65536 methods"))?;
    if sig.asyncness.is_some() {
        return Err(Error::new(
            sig.span(),
            "remote methods are not async fns; #[remote] generates `<method>_async` variants",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(Error::new(
            sig.generics.span(),
            "remote methods cannot be generic",
        ));
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        _ => {
            return Err(Error::new(
                sig.span(),
                "a remote method takes `&self` (calls may run concurrently)",
            ))
        }
    }
    let mut args = Vec::new();
    for a in inputs {
        match a {
            FnArg::Typed(p) => {
                if let Type::Reference(r) = &*p.ty {
                    if r.mutability.is_some() {
                        return Err(Error::new(
                            p.ty.span(),
                            "remote arguments are passed by value; `&mut` cannot be",
                        ));
                    }
                }
                args.push((*p.ty).clone());
            }
            FnArg::Receiver(r) => return Err(Error::new(r.span(), "unexpected receiver")),
        }
    }
    let unit = match &sig.output {
        ReturnType::Default => true,
        ReturnType::Type(_, t) => matches!(&**t, Type::Tuple(tt) if tt.elems.is_empty()),
    };
    if unit && !oneway {
        return Err(Error::new(
            sig.span(),
            "a remote method returns Result<T, E> with E: From<RmiError> (so that a lost \
             connection or timeout can be reported); mark it #[oneway] for a call without reply",
        ));
    }
    Ok(Method {
        name: sig.ident.clone(),
        index,
        args,
        ret: sig.output.clone(),
        oneway,
        nonblocking,
    })
}

const PRIMITIVES: [&str; 10] = [
    "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64",
];

fn primitive(t: &Type) -> bool {
    match t {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .is_some_and(|i| PRIMITIVES.iter().any(|n| i == n)),
        _ => false,
    }
}

/// Whether an argument is a primitive array (`&[P]` or `Vec<P>`), sent as an IPL array
/// rather than through serde.
fn is_array(t: &Type) -> bool {
    match t {
        Type::Reference(r) => matches!(&*r.elem, Type::Slice(s) if primitive(&s.elem)),
        Type::Path(p) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            if last.ident != "Vec" {
                return false;
            }
            match &last.arguments {
                syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => {
                    matches!(a.args.first(), Some(syn::GenericArgument::Type(e)) if primitive(e))
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// The element type of a primitive array argument.
fn element(t: &Type) -> Option<Tokens> {
    match t {
        Type::Reference(r) => match &*r.elem {
            Type::Slice(s) => {
                let e = &s.elem;
                Some(quote!(#e))
            }
            _ => None,
        },
        Type::Path(p) => match &p.path.segments.last()?.arguments {
            syn::PathArguments::AngleBracketed(a) => match a.args.first()? {
                syn::GenericArgument::Type(e) => Some(quote!(#e)),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// The owned type the server decodes for an argument type: `&T` becomes
/// `<T as ToOwned>::Owned`.
fn owned(t: &Type) -> Tokens {
    match t {
        Type::Reference(r) => {
            let inner = &r.elem;
            quote!(<#inner as ::std::borrow::ToOwned>::Owned)
        }
        other => quote!(#other),
    }
}

fn expand(mut t: ItemTrait) -> syn::Result<Tokens> {
    if !t.generics.params.is_empty() {
        return Err(Error::new(
            t.generics.span(),
            "remote interfaces cannot be generic",
        ));
    }
    let mut methods = Vec::new();
    let mut n = 0usize;
    for item in &mut t.items {
        if let TraitItem::Fn(f) = item {
            methods.push(method(f, n)?);
            n += 1;
        } else {
            return Err(Error::new(
                item.span(),
                "a remote interface contains only methods",
            ));
        }
    }
    let name = &t.ident;
    let vis = &t.vis;
    let stub = format_ident!("{}Stub", name);
    let skel = format_ident!("{}Skeleton", name);
    let reference = format_ident!("{}Ref", name);
    let name_str = name.to_string();

    let mut stub_methods = Vec::new();
    let mut async_methods = Vec::new();
    let mut arms = Vec::new();
    for m in &methods {
        let mname = &m.name;
        let idx = m.index;
        let arg_names: Vec<_> = (0..m.args.len())
            .map(|i| format_ident!("__rmi_arg{}", i))
            .collect();
        let arg_types = &m.args;
        let ret = &m.ret;
        let params = quote!(#(#arg_names: #arg_types),*);
        let (arrays, objects): (Vec<_>, Vec<_>) = m
            .args
            .iter()
            .zip(&arg_names)
            .partition(|(t, _)| is_array(t));
        let obj_names: Vec<_> = objects.iter().map(|(_, n)| *n).collect();
        let obj_types: Vec<Tokens> = objects.iter().map(|(t, _)| owned(t)).collect();
        let arr_names: Vec<_> = arrays.iter().map(|(_, n)| *n).collect();
        let arr_elems: Vec<Tokens> = arrays
            .iter()
            .map(|(t, _)| element(t).unwrap_or_else(|| quote!(u8)))
            .collect();
        let writer = quote! {
            ::ibis_rmi::__private::args(|__rmi_m| {
                __rmi_m.write_object(&(#(&#obj_names,)*))?;
                #( __rmi_m.write_array(&#arr_names[..])?; )*
                ::std::result::Result::Ok(())
            })
        };
        let ret_ty: Tokens = match ret {
            ReturnType::Default => quote!(()),
            ReturnType::Type(_, t) => quote!(#t),
        };
        let is_unit = m.oneway && ret_ty.to_string().replace(' ', "") == "()";
        let body = if !m.oneway {
            quote!(self.core.call(#idx, #writer))
        } else if is_unit {
            quote!(self.core.oneway_unit(#idx, #writer))
        } else {
            quote!(self.core.oneway(#idx, #writer))
        };
        stub_methods.push(quote! {
            fn #mname(&self, #params) #ret { #body }
        });
        if !m.oneway {
            let aname = format_ident!("{}_async", mname);
            let doc = format!(
                "Calls `{mname}` asynchronously: the request is sent now; the future \
                 resolves to the reply."
            );
            async_methods.push(quote! {
                #[doc = #doc]
                pub fn #aname(&self, #params) -> ::ibis_rmi::PendingCall<#ret_ty> {
                    self.core.call_async(#idx, #writer)
                }
            });
        }
        let pass: Vec<Tokens> = m
            .args
            .iter()
            .zip(&arg_names)
            .map(|(t, a)| match t {
                Type::Reference(_) => quote!(&#a),
                _ => quote!(#a),
            })
            .collect();
        let make = if is_unit {
            quote!(::ibis_rmi::__private::unit_outcome)
        } else {
            quote!(::ibis_rmi::__private::outcome)
        };
        let nb = m.nonblocking;
        // Borrowed array arguments (`&[P]`) of a call that runs before its request is
        // finished (`#[nonblocking]`, or a serial export) are read from the request in
        // place when the call runs; owned ones (`Vec<P>`) and those of a call that runs
        // on a worker are copied out of it first.
        let spans: Vec<_> = arr_names
            .iter()
            .map(|a| format_ident!("{}_span", a))
            .collect();
        // In the order they were written: spans of the borrowed ones, copies of the
        // owned ones; then the borrowed ones out of their spans (borrowed at once).
        let in_place_reads: Vec<Tokens> = arrays
            .iter()
            .zip(&arr_elems)
            .zip(&spans)
            .map(|(((t, a), e), sp)| match t {
                Type::Reference(_) => quote! {
                    let #sp = ::ibis_rmi::__private::read_array_span::<#e>(__rmi_request)?;
                },
                _ => quote! {
                    let #a: ::std::vec::Vec<#e> = ::ibis_rmi::__private::read_array(__rmi_request)?;
                },
            })
            .collect();
        let in_place_borrows: Vec<Tokens> = arrays
            .iter()
            .zip(&spans)
            .filter(|((t, _), _)| matches!(t, Type::Reference(_)))
            .map(|((_, a), sp)| {
                quote! {
                    let #a = ::ibis_rmi::__private::array_at(&*__rmi_request, &#sp)?;
                }
            })
            .collect();
        let borrows = arrays.iter().any(|(t, _)| matches!(t, Type::Reference(_)));
        let decoded = quote! {
            #( let #arr_names: ::std::vec::Vec<#arr_elems> =
                ::ibis_rmi::__private::read_array(__rmi_request)?; )*
            ::std::result::Result::Ok(::ibis_rmi::Invocation::new(
                #nb,
                move |__rmi_self: &Self| #make(<T as #name>::#mname(&__rmi_self.object, #(#pass),*)),
            ))
        };
        let body = if borrows {
            quote! {
                if #nb || __rmi_in_place {
                    ::std::result::Result::Ok(::ibis_rmi::Invocation::in_place(
                        #nb,
                        move |__rmi_self: &Self, __rmi_request: &mut ::ibis_rmi::__private::ReadMessage| {
                            #(#in_place_reads)*
                            #(#in_place_borrows)*
                            ::std::result::Result::Ok(#make(<T as #name>::#mname(&__rmi_self.object, #(#pass),*)))
                        },
                    ))
                } else {
                    #decoded
                }
            }
        } else {
            decoded
        };
        arms.push(quote! {
            #idx => {
                let (#(#obj_names,)*): (#(#obj_types,)*) =
                    ::ibis_rmi::__private::read_args(__rmi_request)?;
                #body
            }
        });
    }

    let stub_doc = format!(
        "Client side of [`{name_str}`]: a connected stub whose methods call the remote \
         object (get one with `Rmi::stub` or `Rmi::lookup`)."
    );
    let skel_doc =
        format!("Server side of [`{name_str}`]: wraps an object to export with `Rmi::export`.");
    let ref_doc = format!("A serializable remote reference to a [`{name_str}`] object.");
    Ok(quote! {
        #t

        #[doc = #ref_doc]
        #vis type #reference = ::ibis_rmi::RemoteRef<dyn #name>;

        impl ::ibis_rmi::RemoteInterface for dyn #name {
            type Stub = #stub;
            const NAME: &'static str = ::std::concat!(::std::module_path!(), "::", #name_str);
        }

        #[doc = #stub_doc]
        #[derive(Clone, Debug)]
        #vis struct #stub {
            core: ::ibis_rmi::__private::StubCore,
        }

        impl ::ibis_rmi::Stub for #stub {
            type Interface = dyn #name;
            fn from_core(core: ::ibis_rmi::__private::StubCore) -> Self {
                #stub { core }
            }
            fn core(&self) -> &::ibis_rmi::__private::StubCore {
                &self.core
            }
        }

        impl #name for #stub {
            #(#stub_methods)*
        }

        impl #stub {
            #(#async_methods)*
        }

        #[doc = #skel_doc]
        #vis struct #skel<T> {
            object: T,
        }

        impl<T> #skel<T> {
            /// Wraps the object.
            pub fn new(object: T) -> Self {
                #skel { object }
            }
            /// The object.
            pub fn object(&self) -> &T {
                &self.object
            }
        }

        impl<T: #name + ::std::marker::Send + 'static> ::ibis_rmi::Skeleton for #skel<T> {
            type Interface = dyn #name;
            fn decode(
                &self,
                __rmi_method: u16,
                __rmi_request: &mut ::ibis_rmi::__private::ReadMessage,
                __rmi_in_place: bool,
            ) -> ::std::result::Result<::ibis_rmi::Invocation<Self>, ::ibis_rmi::RmiError> {
                let _ = (&__rmi_request, __rmi_in_place);
                match __rmi_method {
                    #(#arms)*
                    other => ::std::result::Result::Err(::ibis_rmi::RmiError::NoSuchMethod(other)),
                }
            }
        }
    })
}
