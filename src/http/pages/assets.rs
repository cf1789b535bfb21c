//! The static assets the pages link and the headers they are served with.
//! No build step: the files are included as they are written.

/// `/ui/app.js`: live regions re-fetched every `data-refresh-ms` and the
/// confirmation `<dialog>`. Serve as `text/javascript; charset=utf-8`.
pub const APP_JS: &str = include_str!("assets/app.js");

/// `/ui/app.css`: responsive (tables become labelled cards on a phone),
/// light and dark. Serve as `text/css; charset=utf-8`.
pub const APP_CSS: &str = include_str!("assets/app.css");

/// The Content-Security-Policy of every page and asset: scripts, styles,
/// images and fetches from this origin only, no inline script or style (the
/// pages have none), forms post only here, no framing, no `<base>`.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// Headers for every dashboard response (pages and assets): the CSP; no
/// MIME sniffing (the JS and CSS run only with their declared types); no
/// referrer beyond this origin (ids and group names are in URLs); never
/// framed, for browsers that ignore `frame-ancestors`.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
];

/// Content types to serve the pages and assets with.
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=utf-8";
pub const JS_CONTENT_TYPE: &str = "text/javascript; charset=utf-8";
pub const CSS_CONTENT_TYPE: &str = "text/css; charset=utf-8";
