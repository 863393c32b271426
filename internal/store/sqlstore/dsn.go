package sqlstore

import (
	"cmp"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// The DSNs toc accepts, as error messages show them: the URL forms first.
const (
	formsPostgres = "postgres://user:pass@host:5432/db"
	formsMySQL    = "mysql://user:pass@host:3306/db (or the MySQL driver's form user:pass@tcp(host:3306)/db)"
	formsAll      = "postgres://user:pass@host:5432/db or " + formsMySQL
)

// errNotDSN is a DSN of no dialect toc knows.
var errNotDSN = errors.New("not a PostgreSQL or MySQL DSN")

// CheckDSN reports whether the store can use dsn (one of [Options.DSNs]),
// without connecting. Its error shows dsn with the password masked and the
// forms the store accepts.
func CheckDSN(dsn string) error {
	_, _, err := parseDSN(dsn)
	return err
}

// RedactDSN returns dsn with its password, if any, replaced by xxxxx: the
// password of a URL or of the MySQL driver's form (user:pass@…), and any
// password=… parameter. It is meant for messages, and masks more than the
// password when in doubt.
func RedactDSN(dsn string) string {
	s := passwordParam.ReplaceAllString(dsn, "${1}xxxxx")
	prefix, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	// user:pass@ ends at the last @ before the last / (where the MySQL
	// driver looks; a URL's password has neither unescaped), or at the
	// last @ when there is no /, or none before it.
	at := -1
	if slash := strings.LastIndexByte(rest, '/'); slash >= 0 {
		at = strings.LastIndexByte(rest[:slash], '@')
	}
	if at < 0 {
		at = strings.LastIndexByte(rest, '@')
	}
	if at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			rest = rest[:colon+1] + "xxxxx" + rest[at:]
		}
	}
	return prefix + rest
}

// passwordParam is a password=… parameter of a URL's query or of
// PostgreSQL's keyword/value form.
var passwordParam = regexp.MustCompile(`(?i)(\bpassword=)('[^']*'|[^\s&]*)`)

// parseDSN returns the dialect of dsn and a connector for it. Its error
// shows dsn with the password masked, what is wrong, and the forms accepted.
func parseDSN(dsn string) (*dialect, driver.Connector, error) {
	d, conn, err := parseDSNUnmasked(dsn)
	if err == nil {
		return d, conn, nil
	}
	masked := RedactDSN(dsn)
	if masked != dsn {
		// err may quote part of the password (a parser's message does):
		// say what is wrong with the masked DSN instead.
		if _, _, merr := parseDSNUnmasked(masked); merr != nil {
			err = merr
		} else {
			err = errors.New("cannot be parsed with its password (in a URL, percent-encode the password's @ : / ? # and %)")
		}
	}
	forms := formsAll
	switch d {
	case postgresDialect:
		forms = formsPostgres
	case mysqlDialect:
		forms = formsMySQL
	}
	return nil, nil, fmt.Errorf("%q: %v; use %s", masked, err, forms)
}

// parseDSNUnmasked is parseDSN, with errors that may quote the password. It
// returns the dialect whenever it knows it.
func parseDSNUnmasked(dsn string) (*dialect, driver.Connector, error) {
	d, err := dialectOf(dsn)
	if err != nil {
		return nil, nil, err
	}
	conn, err := d.connector(dsn)
	return d, conn, err
}

// cutScheme splits dsn, trimmed of spaces, at "://", and lowercases the
// scheme. ok is false when there is no scheme (rest is then all of dsn).
func cutScheme(dsn string) (scheme, rest string, ok bool) {
	dsn = strings.TrimSpace(dsn)
	scheme, rest, ok = strings.Cut(dsn, "://")
	if !ok {
		return "", dsn, false
	}
	return strings.ToLower(scheme), rest, true
}

// dialectOf returns the dialect of dsn: PostgreSQL for postgres:// and
// postgresql://; MySQL for mysql:// and mariadb://, and for the MySQL
// driver's form without a scheme when it names its net(addr).
func dialectOf(dsn string) (*dialect, error) {
	scheme, rest, ok := cutScheme(dsn)
	switch {
	case scheme == "postgres" || scheme == "postgresql":
		return postgresDialect, nil
	case scheme == "mysql" || scheme == "mariadb":
		return mysqlDialect, nil
	case !ok:
		if driverForm, explicit := mysqlDriverForm(rest); driverForm && explicit {
			return mysqlDialect, nil
		}
	}
	return nil, errNotDSN
}

// mysqlDriverForm reports whether s, a MySQL DSN without its scheme, is in
// go-sql-driver/mysql's form, [user[:pass]@][net[(addr)]]/db[?params],
// rather than a URL's: whether what lies between its last @ and its last /
// (where the driver looks for the network) is empty (the driver's default,
// tcp(127.0.0.1:3306)), a bare network (tcp, unix), or net(addr). explicit
// reports the last.
func mysqlDriverForm(s string) (driverForm, explicit bool) {
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		return false, false
	}
	n := s[:slash]
	n = n[strings.LastIndexByte(n, '@')+1:]
	switch {
	case n == "" || n == "tcp" || n == "unix":
		return true, false
	case netAddr.MatchString(n):
		return true, true
	}
	return false, false
}

// netAddr is the driver's net(addr), like tcp(127.0.0.1:3306).
var netAddr = regexp.MustCompile(`^[a-z][a-z0-9]*\(.*\)$`)

// mysqlConfig returns the driver's configuration of a MySQL DSN: a URL,
// mysql://user:pass@host:3306/db?param=value (or mariadb://), or the
// driver's form, with the scheme or (when it names its net(addr)) without.
func mysqlConfig(dsn string) (*mysql.Config, error) {
	_, rest, _ := cutScheme(dsn)
	if driverForm, _ := mysqlDriverForm(rest); driverForm {
		cfg, err := parseDriverDSN(rest)
		if err != nil {
			return nil, err
		}
		if cfg.DBName == "" {
			return nil, errors.New("names no database")
		}
		return cfg, nil
	}
	return mysqlURLConfig(rest)
}

// mysqlURLConfig returns the configuration of rest, a MySQL URL without its
// scheme: [user[:pass]@]host[:port]/db[?params]. The user and password are
// percent-decoded; the port defaults to 3306; the parameters are the
// driver's (tls=true, timeout=5s…) or system variables to set
// (time_zone=%27%2B00:00%27…).
func mysqlURLConfig(rest string) (*mysql.Config, error) {
	const noUnix = "unix sockets are not supported in the URL form: use the driver's form, mysql://user:pass@unix(/path/to/mysqld.sock)/db"
	u, err := url.Parse("mysql://" + rest)
	if err != nil {
		// Not url.Error's message: it quotes the whole URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL (%v)", err)
	}
	if u.Fragment != "" {
		return nil, errors.New("has a #fragment (percent-encode # as %23)")
	}
	db := strings.TrimPrefix(u.Path, "/")
	host, port := u.Hostname(), cmp.Or(u.Port(), "3306")
	switch {
	case strings.Contains(db, "/"):
		return nil, errors.New("has a path of more than a database name (" + noUnix + ")")
	case host == "":
		return nil, errors.New("names no host")
	case strings.ContainsAny(host, "()"):
		return nil, errors.New("has a host with ( or ) in it")
	case db == "":
		return nil, errors.New("names no database")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("has port %s, not 1 to 65535", port)
	}
	q := u.Query()
	for _, k := range []string{"socket", "unix_socket"} {
		if q.Has(k) {
			return nil, fmt.Errorf("has a %s parameter: %s", k, noUnix)
		}
	}
	for _, k := range []string{"user", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("has a %s parameter: put the user and password before the host (user:pass@host)", k)
		}
	}
	// The parameters go through the driver's own parser: it knows which
	// are settings and which are system variables. It takes the last / of
	// a DSN for the one before the database: an unescaped / in a value
	// would fool it.
	cfg, err := parseDriverDSN("/?" + strings.ReplaceAll(u.RawQuery, "/", "%2F"))
	if err != nil {
		return nil, err
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort(host, port)
	cfg.DBName = db
	// Set by the parser from tls= with the default address's server name:
	// mysql.NewConnector sets it again, with Addr's.
	cfg.TLS = nil
	return cfg, nil
}

// parseDriverDSN is mysql.ParseDSN, which panics on a strict parameter.
func parseDriverDSN(s string) (cfg *mysql.Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return mysql.ParseDSN(s)
}
