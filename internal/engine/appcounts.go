package engine

// appCounts counts tasks by app, in the order the apps first came. A
// call's tasks are mostly of one app: a few apps are searched in the
// list, more through an index made then.
type appCounts struct {
	list  []appCount
	index map[string]int // app → its place in list, once list is long
}

type appCount struct {
	app string
	n   int
}

// appIndexFrom is the length of list from which add keeps an index.
const appIndexFrom = 8

// add counts n more tasks of app.
func (c *appCounts) add(app string, n int) {
	if c.index != nil {
		if i, ok := c.index[app]; ok {
			c.list[i].n += n
			return
		}
	} else {
		for i := len(c.list) - 1; i >= 0; i-- {
			if c.list[i].app == app {
				c.list[i].n += n
				return
			}
		}
	}
	c.list = append(c.list, appCount{app, n})
	switch {
	case c.index != nil:
		c.index[app] = len(c.list) - 1
	case len(c.list) == appIndexFrom:
		c.index = make(map[string]int, 2*appIndexFrom)
		for i, a := range c.list {
			c.index[a.app] = i
		}
	}
}
