// Package dashboard is `otactl dashboard`: a web page of the fleet and its
// rollouts, served by otactl from a fleet view (fleetview) and the
// rollouts' retained states, live over server-sent events. The page is
// plain HTML, CSS and JavaScript embedded in the binary, so it works
// offline; it sets what devices publish only as text, under a strict
// Content-Security-Policy, and the server cuts what is too long to show.
// The device table is paged by the server (fleetview.Query), so a 100,000
// device fleet costs a page a request. It listens on loopback unless given
// TLS and a token (Access). Read-only: nothing here publishes but the
// fleet view's report request.
package dashboard
