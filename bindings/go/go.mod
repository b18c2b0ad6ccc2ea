module clade.dev/clade

go 1.19
