package logging

import (
	"regexp"
	"strings"
)

// URLPassword stands in for a password taken out of a URL; it keeps the URL readable and valid.
const URLPassword = "xxxxx"

var (
	// userinfoPassword matches scheme://user:password@ up to the last @ of the authority, as url.Parse
	// reads it, so an unencoded @ in the password is covered too. The password is taken as written:
	// percent-encoded or not.
	userinfoPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/?#@]*:)[^\s/?#]*@`)
	// queryPassword matches password=… (and sslpassword=…) parameters, which libpq and pgx accept in a
	// database URL, and in libpq's key=value form (host=db password=…, the value maybe in single
	// quotes with \' escapes), which an operator may put in database.url and an error then quotes.
	queryPassword = regexp.MustCompile(`(?i)((?:^|[?&;\s"])(?:ssl)?password=)(?:'(?:[^'\\]|\\.)*'|[^&#\s"']*)`)
)

// RedactURLs hides the passwords of every URL in s: the user-info password and password query
// parameters. It works on text, not on one parsed URL, so error messages and log lines that quote a
// URL are covered, and a URL that does not parse is still redacted.
func RedactURLs(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(strings.ToLower(s), "password=") {
		return s // the common case, kept cheap: this runs on every logged string
	}
	s = userinfoPassword.ReplaceAllString(s, "${1}"+URLPassword+"@")
	return queryPassword.ReplaceAllString(s, "${1}"+URLPassword)
}
