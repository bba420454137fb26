module github.com/funnelrl/funnel

go 1.24
