module github.com/sluicemq/sluice/api

go 1.26
